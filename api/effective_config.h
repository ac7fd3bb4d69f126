// The effective settings of a Revision as display rows — value + where it
// came from — for `knap describe` and the console (the knap.dev
// EffectiveAutoscaling view). Built on the one model of a Revision's settings,
// api/revision_settings.h, which it re-exports.
// Pure functions; thread-safe.
#pragma once

#include <vector>

#include <nlohmann/json.hpp>

#include "api/revision_settings.h"
#include "common/config.h"

namespace knap::api {

// Every KPA setting (class, metric, target, target-utilization-percentage,
// target-burst-capacity, min-scale, max-scale, initial-scale, activation-scale,
// window, panic-window-percentage, panic-threshold-percentage,
// scale-down-delay, scale-to-zero-pod-retention-period, enable-scale-to-zero,
// scale-to-zero-grace-period, max-scale-up-rate, max-scale-down-rate,
// metric-aggregation-algorithm), in that order. Values of annotations are shown
// as written (validation has already checked them).
std::vector<EffectiveValue> effectiveAutoscaling(const nlohmann::json& annotations, const Config& config);

// Those rows, then the Revision's containerConcurrency, timeoutSeconds,
// responseStartTimeoutSeconds, idleTimeoutSeconds and progress-deadline.
std::vector<EffectiveValue> effectiveSettings(const nlohmann::json& revision, const Config& config);

}  // namespace knap::api
