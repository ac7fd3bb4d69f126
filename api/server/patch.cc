#include "api/server/patch.h"

#include <cctype>
#include <vector>

namespace knap::api {

using nlohmann::json;

namespace {

// Kubernetes' limit (apiserver: maxJSONPatchOperations).
constexpr size_t kMaxJsonPatchOperations = 10000;

// Values in `v`, counting stops once past `cap` (so the cost is at most cap).
size_t countValues(const json& v, size_t cap) {
  size_t n = 0;
  std::vector<const json*> todo{&v};
  while (!todo.empty() && n <= cap) {
    const json* cur = todo.back();
    todo.pop_back();
    ++n;
    if (cur->is_structured()) {
      for (const json& child : *cur) todo.push_back(&child);
    }
  }
  return n;
}

}  // namespace

StatusOr<json> applyJsonPatch(const json& doc, const json& patch, const DecodeLimits& limits) {
  if (!patch.is_array()) return invalidArgument("a JSON patch must be an array of operations");
  if (patch.size() > kMaxJsonPatchOperations)
    return Status(Code::kResourceExhausted, "the JSON patch has " + std::to_string(patch.size()) +
                                                " operations; at most " +
                                                std::to_string(kMaxJsonPatchOperations) + " are allowed");
  for (size_t i = 0; i < patch.size(); ++i) {
    const json& op = patch[i];
    if (!op.is_object() || !op.contains("op") || !op["op"].is_string() || !op.contains("path") ||
        !op["path"].is_string())
      return Status(Code::kFailedPrecondition,
                    "operation " + std::to_string(i) + " must be an object with string \"op\" and \"path\"");
  }
  // One operation at a time, with the growth each would cause counted first:
  // a patch that copies a value into itself doubles the document per
  // operation, so the budget is checked before the copy, never after.
  json result = doc;
  size_t values = countValues(result, limits.max_nodes);
  try {
    for (size_t i = 0; i < patch.size(); ++i) {
      const json& op = patch[i];
      const std::string& name = op["op"].get_ref<const std::string&>();
      size_t added = 0;
      if ((name == "add" || name == "replace") && op.contains("value")) {
        added = countValues(op["value"], limits.max_nodes);
      } else if (name == "copy" && op.contains("from") && op["from"].is_string()) {
        json::json_pointer from(op["from"].get<std::string>());
        if (result.contains(from)) added = countValues(result.at(from), limits.max_nodes);
      }
      if (added > limits.max_nodes || values > limits.max_nodes - added)
        return Status(Code::kResourceExhausted, "operation " + std::to_string(i) + " (" + name + " " +
                                                    op["path"].get<std::string>() +
                                                    ") would make the object larger than " +
                                                    std::to_string(limits.max_nodes) + " values");
      values += added;
      result.patch_inplace(json::array({op}));
    }
  } catch (const json::exception& e) {
    std::string what = e.what();
    size_t p = what.find("] ");
    return invalidArgument("the JSON patch could not be applied: " +
                           (p == std::string::npos ? what : what.substr(p + 2)));
  }
  return result;
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
