// Reading a value out of a JSON document that may not have the expected
// shape (a stored object, a registry's or an ACME server's response): every
// step checks the type, nothing throws, nothing is inserted. Written once;
// callers build their own defaults on top.
#pragma once

#include <initializer_list>
#include <nlohmann/json.hpp>
#include <string>

namespace knap {

// The value at `path` (object member names, outermost first); nullptr when
// a step is missing or its parent is not an object. An empty path is `j`.
const nlohmann::json* jsonAt(const nlohmann::json& j, std::initializer_list<const char*> path);

// The value at `path`, or a null value when it is absent: for reading on
// with is_*() checks without a nullptr test.
const nlohmann::json& valueAt(const nlohmann::json& j, std::initializer_list<const char*> path);
inline const nlohmann::json& valueAt(const nlohmann::json& j, const char* key) {
  return valueAt(j, {key});
}

// The string at `path`; "" when absent or not a string.
std::string stringAt(const nlohmann::json& j, std::initializer_list<const char*> path);
inline std::string stringAt(const nlohmann::json& j, const char* key) {
  return stringAt(j, {key});
}

}  // namespace knap
