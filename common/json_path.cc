#include "common/json_path.h"

namespace knap {

const nlohmann::json* jsonAt(const nlohmann::json& j, std::initializer_list<const char*> path) {
  const nlohmann::json* cur = &j;
  for (const char* key : path) {
    if (!cur->is_object()) return nullptr;
    auto it = cur->find(key);
    if (it == cur->end()) return nullptr;
    cur = &*it;
  }
  return cur;
}

const nlohmann::json& valueAt(const nlohmann::json& j, std::initializer_list<const char*> path) {
  static const nlohmann::json kNull;
  const nlohmann::json* v = jsonAt(j, path);
  return v != nullptr ? *v : kNull;
}

std::string stringAt(const nlohmann::json& j, std::initializer_list<const char*> path) {
  const nlohmann::json* v = jsonAt(j, path);
  return v != nullptr && v->is_string() ? v->get<std::string>() : std::string();
}

}  // namespace knap
