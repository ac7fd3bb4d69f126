// Standard base64 (RFC 4648 §4, with padding), as Kubernetes uses for Secret
// data and Docker config.json "auth" fields. Pure functions; thread-safe.
#pragma once

#include <string>
#include <string_view>

namespace knap {

std::string base64Encode(std::string_view in);
// Strict: only the standard alphabet, length a multiple of 4, '=' only as the
// final one or two characters, and no stray bits in the last group (what Go's
// base64.StdEncoding accepts). Returns false on anything else.
bool base64Decode(std::string_view in, std::string* out);

// base64url without padding (RFC 4648 §5, RFC 7515 §2), as JWTs and ACME's
// JWS use. Decode is as strict as base64Decode: only the URL alphabet, no
// '=', no length of 1 mod 4, no stray bits in the last group.
std::string base64UrlEncode(std::string_view in);
bool base64UrlDecode(std::string_view in, std::string* out);

}  // namespace knap
