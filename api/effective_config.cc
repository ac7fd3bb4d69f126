#include "api/effective_config.h"

#include <utility>

namespace knap::api {

std::vector<EffectiveValue> effectiveAutoscaling(const nlohmann::json& annotations, const Config& config) {
  RevisionSettings s = revisionSettings({{"metadata", {{"annotations", annotations}}}}, config);
  s.rows.resize(s.autoscaling_rows);
  return std::move(s.rows);
}

std::vector<EffectiveValue> effectiveSettings(const nlohmann::json& revision, const Config& config) {
  return revisionSettings(revision, config).rows;
}

}  // namespace knap::api
