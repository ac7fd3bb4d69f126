#include "api/core_objects.h"

#include <vector>

#include "api/naming.h"
#include "common/base64.h"
#include "common/json_path.h"

namespace knap::api {

using nlohmann::json;

namespace {

constexpr size_t kMaxDataBytes = 1024 * 1024;  // kube-apiserver's MaxSecretSize / configmap limit
constexpr const char* kImmutableForbidden = "Forbidden: field is immutable when `immutable` is set";

std::string quoteJson(const std::string& s) {
  return json(s).dump(-1, ' ', false, json::error_handler_t::replace);
}

struct Errors {
  std::vector<FieldError> list;
  void add(std::string field, std::string message, const char* reason = "FieldValueInvalid") {
    list.push_back({std::move(field), std::move(message), reason});
  }
  Status status(const std::string& kind) {
    if (list.empty()) return Status::ok();
    std::string msg = kind + " is invalid";
    return invalidArgument(msg).withFieldErrors(std::move(list));
  }
};

// Checks the keys of a data map; adds up the value bytes into *total.
void checkKeys(const json& map, const std::string& field, Errors& errs) {
  if (!map.is_object()) return;
  for (auto it = map.begin(); it != map.end(); ++it) {
    std::string problem = configKeyError(it.key());
    if (!problem.empty())
      errs.add(field + "[" + it.key() + "]", "Invalid value: " + quoteJson(it.key()) + ": " + problem);
  }
}

// The decoded size of base64 map values (strings checked by the schema).
size_t decodedBytes(const json& map) {
  size_t n = 0;
  if (!map.is_object()) return 0;
  for (auto it = map.begin(); it != map.end(); ++it) {
    if (!it->is_string()) continue;
    const std::string& v = it->get_ref<const std::string&>();
    n += v.size() / 4 * 3;
  }
  return n;
}

void checkBase64(const json& map, const std::string& field, Errors& errs) {
  if (!map.is_object()) return;
  for (auto it = map.begin(); it != map.end(); ++it) {
    if (!it->is_string()) continue;
    std::string out;
    if (!base64Decode(it->get_ref<const std::string&>(), &out))
      errs.add(
          field + "[" + it.key() + "]",
          "Invalid value: \"<value omitted>\": illegal base64 data (standard base64 with padding required)");
  }
}

void checkImmutable(const json& obj, const json* old, std::initializer_list<const char*> data_fields,
                    Errors& errs) {
  if (!old || valueAt(*old, "immutable") != json(true)) return;
  for (const char* f : data_fields) {
    if (valueAt(obj, f) != valueAt(*old, f)) errs.add(f, kImmutableForbidden, "FieldValueForbidden");
  }
  if (valueAt(obj, "immutable") != json(true))
    errs.add("immutable", kImmutableForbidden, "FieldValueForbidden");
}

void checkName(const json& obj, bool label, Errors& errs) {
  const json& name = valueAt(valueAt(obj, "metadata"), "name");
  if (!name.is_string()) return;  // the REST layer requires a name
  const std::string& n = name.get_ref<const std::string&>();
  if (label ? isDns1123Label(n) : isDns1123Subdomain(n)) return;
  errs.add(
      "metadata.name",
      "Invalid value: " + quoteJson(n) +
          (label ? ": a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', "
                   "and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', "
                   "regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')"
                 : ": a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' "
                   "or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex "
                   "used for validation is "
                   "'[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"));
}

void requireKey(const json& data, const char* key, Errors& errs) {
  if (!data.is_object() || !data.contains(key))
    errs.add(std::string("data[") + key + "]", "Required value", "FieldValueRequired");
}

void requireJsonKey(const json& data, const char* key, Errors& errs) {
  requireKey(data, key, errs);
  if (!data.is_object() || !data.contains(key) || !data[key].is_string()) return;
  std::string raw;
  if (!base64Decode(data[key].get_ref<const std::string&>(), &raw)) return;  // reported by checkBase64
  json parsed = json::parse(raw, nullptr, false);
  if (parsed.is_discarded() || !parsed.is_object())
    errs.add(std::string("data[") + key + "]",
             "Invalid value: \"<secret contents redacted>\": the value must be a JSON object");
}

Status validateSecret(const json& obj, const json* old) {
  Errors errs;
  checkName(obj, false, errs);
  const json& data = valueAt(obj, "data");
  checkKeys(data, "data", errs);
  checkBase64(data, "data", errs);
  if (decodedBytes(data) > kMaxDataBytes)
    errs.add("data", "Too long: must have at most " + std::to_string(kMaxDataBytes) + " bytes",
             "FieldValueTooLong");
  std::string type = valueAt(obj, "type").is_string() ? valueAt(obj, "type").get<std::string>() : "";
  if (type == kSecretTypeTls) {
    requireKey(data, "tls.crt", errs);
    requireKey(data, "tls.key", errs);
  } else if (type == kSecretTypeDockerConfigJson) {
    requireJsonKey(data, ".dockerconfigjson", errs);
  } else if (type == "kubernetes.io/dockercfg") {
    requireJsonKey(data, ".dockercfg", errs);
  } else if (type == "kubernetes.io/ssh-auth") {
    requireKey(data, "ssh-privatekey", errs);
  } else if (type == "kubernetes.io/basic-auth") {
    if (!data.is_object() || (!data.contains("username") && !data.contains("password")))
      errs.add("data[username]", "Required value: either username or password is required",
               "FieldValueRequired");
  } else if (type == "kubernetes.io/service-account-token") {
    errs.add("type",
             "Unsupported value: \"kubernetes.io/service-account-token\": knap has no service accounts",
             "FieldValueNotSupported");
  }
  if (old) {
    const json& old_type = valueAt(*old, "type");
    if (old_type.is_string() && old_type.get<std::string>() != type)
      errs.add("type", "Invalid value: " + quoteJson(type) + ": field is immutable");
  }
  checkImmutable(obj, old, {"data"}, errs);
  return errs.status("Secret");
}

Status validateConfigMap(const json& obj, const json* old) {
  Errors errs;
  checkName(obj, false, errs);
  const json& data = valueAt(obj, "data");
  const json& binary = valueAt(obj, "binaryData");
  checkKeys(data, "data", errs);
  checkKeys(binary, "binaryData", errs);
  checkBase64(binary, "binaryData", errs);
  size_t total = decodedBytes(binary);
  if (data.is_object()) {
    for (auto it = data.begin(); it != data.end(); ++it) {
      if (it->is_string()) total += it->get_ref<const std::string&>().size();
      if (binary.is_object() && binary.contains(it.key()))
        errs.add("data[" + it.key() + "]",
                 "Invalid value: " + quoteJson(it.key()) + ": duplicate of key present in binaryData");
    }
  }
  if (total > kMaxDataBytes)
    errs.add("", "Too long: must have at most " + std::to_string(kMaxDataBytes) + " bytes",
             "FieldValueTooLong");
  checkImmutable(obj, old, {"data", "binaryData"}, errs);
  return errs.status("ConfigMap");
}

Status validateNamespace(const json& obj) {
  Errors errs;
  checkName(obj, true, errs);
  return errs.status("Namespace");
}

}  // namespace

bool isSystemNamespace(const std::string& name) {
  for (const char* n : kSystemNamespaces)
    if (name == n) return true;
  return false;
}

bool isCoreKind(const std::string& kind) {
  return kind == "Namespace" || kind == "Secret" || kind == "ConfigMap";
}

std::string configKeyError(const std::string& key) {
  if (key.empty()) return "a valid config key must not be empty";
  if (key.size() > 253) return "must be no more than 253 characters";
  if (key == ".") return "must not be '.'";
  if (key == "..") return "must not be '..'";
  if (key.rfind("..", 0) == 0) return "must not start with '..'";
  for (char c : key) {
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ||
              c == '_' || c == '.';
    if (!ok)
      return "a valid config key must consist of alphanumeric characters, '-', '_' or '.' (e.g. 'key.name',  "
             "or "
             "'KEY_NAME',  or 'key-name', regex used for validation is '[-._a-zA-Z0-9]+')";
  }
  return "";
}

Status setCoreDefaults(const std::string& kind, json& obj) {
  if (kind == "Secret") {
    if (!obj.contains("type") || obj["type"].is_null() ||
        (obj["type"].is_string() && obj["type"].get_ref<const std::string&>().empty()))
      obj["type"] = kSecretTypeOpaque;
    if (obj.contains("stringData")) {
      const json& sd = obj["stringData"];
      if (sd.is_object()) {
        if (!obj.contains("data") || !obj["data"].is_object()) obj["data"] = json::object();
        for (auto it = sd.begin(); it != sd.end(); ++it) {
          if (!it->is_string())
            return invalidArgument("stringData[" + it.key() + "] must be a string")
                .withFieldErrors({{"stringData[" + it.key() + "]", "Invalid value: must be a string"}});
          obj["data"][it.key()] = base64Encode(it->get_ref<const std::string&>());
        }
      }
      obj.erase("stringData");
    }
    if (obj.contains("data") && obj["data"].is_object() && obj["data"].empty()) obj.erase("data");
  } else if (kind == "ConfigMap") {
    for (const char* f : {"data", "binaryData"})
      if (obj.contains(f) && obj[f].is_object() && obj[f].empty()) obj.erase(f);
  } else if (kind == "Namespace") {
    if (!obj.contains("spec") || !obj["spec"].is_object()) obj["spec"] = json::object();
    if (!obj["spec"].contains("finalizers")) obj["spec"]["finalizers"] = json::array({"kubernetes"});
    obj["status"] = {{"phase", "Active"}};
  }
  return Status::ok();
}

Status validateCore(const std::string& kind, const json& obj, const json* old) {
  if (kind == "Secret") return validateSecret(obj, old);
  if (kind == "ConfigMap") return validateConfigMap(obj, old);
  if (kind == "Namespace") return validateNamespace(obj);
  return invalidArgument("unknown core kind \"" + kind + "\"");
}

}  // namespace knap::api
