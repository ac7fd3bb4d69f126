// The API's fuzz targets as plain functions, so that libFuzzer binaries
// (fuzz_*.cc, built with -Dfuzz=true) and the corpus replay unit test
// (corpus_replay_test.cc, every build) run the same code. Each returns 0 and
// must never crash, hang or leak, whatever the bytes.
#pragma once

#include <cstddef>
#include <cstdint>

namespace knap::fuzz {

// YAML decoding (one or more documents, and one request body), then the
// emitter and a re-decode of what it wrote.
int yamlDecode(const uint8_t* data, size_t size);
// JSON decoding and the document size check.
int jsonDecode(const uint8_t* data, size_t size);
// A decoded body through admission for each kind: unknown fields, defaulting,
// validation (create, and update against itself), quantities.
int admission(const uint8_t* data, size_t size);
// "<document>\0<patch>": JSON patch, merge patch and apply (merge) onto the
// document, each result size-checked. The first byte picks the decoder of the
// patch (JSON or YAML).
int patching(const uint8_t* data, size_t size);

}  // namespace knap::fuzz
