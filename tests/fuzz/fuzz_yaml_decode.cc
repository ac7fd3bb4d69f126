// libFuzzer entry point for knap::fuzz::yamlDecode (tests/fuzz/fuzz_targets.h).
#include "tests/fuzz/fuzz_targets.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  return knap::fuzz::yamlDecode(data, size);
}
