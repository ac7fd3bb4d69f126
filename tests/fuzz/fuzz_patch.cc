// libFuzzer entry point for knap::fuzz::patching (tests/fuzz/fuzz_targets.h).
#include "tests/fuzz/fuzz_targets.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  return knap::fuzz::patching(data, size);
}
