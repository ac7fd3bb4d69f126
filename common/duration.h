// Go-style durations ("1h30m", "60s", "500ms", "0"), the syntax Knative's
// ConfigMaps and annotations use.
#pragma once

#include <chrono>
#include <string>

#include "common/status.h"

namespace knap {

// Parses a Go duration. Errors say what is wrong: `invalid duration "6x": unknown unit "x"`.
StatusOr<std::chrono::nanoseconds> parseGoDuration(const std::string& text);
// Formats like Go's time.Duration.String(): 1m30s, 500ms, 0s.
std::string formatGoDuration(std::chrono::nanoseconds d);

}  // namespace knap
