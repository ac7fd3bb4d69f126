#include "api/server/patch.h"

#include <cctype>
#include <vector>

namespace knap::api {

using nlohmann::json;

StatusOr<json> applyJsonPatch(const json& doc, const json& patch) {
  if (!patch.is_array()) return invalidArgument("a JSON patch must be an array of operations");
  for (size_t i = 0; i < patch.size(); ++i) {
    const json& op = patch[i];
    if (!op.is_object() || !op.contains("op") || !op["op"].is_string() || !op.contains("path") ||
        !op["path"].is_string())
      return Status(Code::kFailedPrecondition,
                    "operation " + std::to_string(i) + " must be an object with string \"op\" and \"path\"");
  }
  try {
    return doc.patch(patch);
  } catch (const json::exception& e) {
    std::string what = e.what();
    size_t p = what.find("] ");
    return invalidArgument("the JSON patch could not be applied: " +
                           (p == std::string::npos ? what : what.substr(p + 2)));
  }
}

namespace {

struct Step {
  std::string key;  // object key, or empty for an index step
  long index = -1;
};

bool parsePath(const std::string& path, std::vector<Step>* steps) {
  size_t i = 0;
  while (i < path.size()) {
    if (path[i] == '[') {
      size_t close = path.find(']', i);
      if (close == std::string::npos) return false;
      std::string num = path.substr(i + 1, close - i - 1);
      if (num.empty() || num.size() > 9) return false;
      for (char c : num)
        if (!std::isdigit(static_cast<unsigned char>(c))) return false;
      steps->push_back({"", std::stol(num)});
      i = close + 1;
      if (i < path.size() && path[i] == '.') ++i;
      continue;
    }
    size_t end = path.find_first_of(".[", i);
    steps->push_back({path.substr(i, end == std::string::npos ? std::string::npos : end - i), -1});
    if (end == std::string::npos) break;
    i = path[end] == '.' ? end + 1 : end;
  }
  return !steps->empty();
}

}  // namespace

bool removeFieldPath(json& obj, const std::string& path) {
  std::vector<Step> steps;
  if (!parsePath(path, &steps)) return false;
  json* cur = &obj;
  for (size_t i = 0; i + 1 < steps.size(); ++i) {
    const Step& s = steps[i];
    if (s.index >= 0) {
      if (!cur->is_array() || static_cast<size_t>(s.index) >= cur->size()) return false;
      cur = &(*cur)[static_cast<size_t>(s.index)];
    } else {
      if (!cur->is_object() || !cur->contains(s.key)) return false;
      cur = &(*cur)[s.key];
    }
  }
  const Step& last = steps.back();
  if (last.index >= 0) {
    if (!cur->is_array() || static_cast<size_t>(last.index) >= cur->size()) return false;
    cur->erase(static_cast<size_t>(last.index));
    return true;
  }
  if (!cur->is_object()) return false;
  return cur->erase(last.key) > 0;
}

}  // namespace knap::api
