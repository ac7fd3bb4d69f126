// Placeholder until the config loader lands (owner: store/config helper).
#include "common/config.h"

namespace knap {

Config defaultConfig() {
  Config c;
  c.domain.domains.push_back({"localhost", {}});
  return c;
}

StatusOr<Config> parseConfig(const std::string&) { return Status(Code::kUnsupported, "config files not supported yet"); }
StatusOr<Config> loadConfigFile(const std::string& path) { return parseConfig(path); }

}  // namespace knap
