#include "api/pod_objects.h"

#include <cctype>

#include "common/base64.h"
#include "common/json_path.h"

namespace knap::api {

using nlohmann::json;

namespace {

std::string str(const json& o, const char* k) {
  const json& v = valueAt(o, k);
  return v.is_string() ? v.get<std::string>() : "";
}

bool optional(const json& ref) {
  return valueAt(ref, "optional") == true;
}

// The kind's key/value pairs as a container sees them (Secret data decoded).
// For env only `data`; volumes also get a ConfigMap's binaryData.
std::map<std::string, std::string> values(const std::string& kind, const json& obj, bool with_binary) {
  std::map<std::string, std::string> out;
  const json& data = valueAt(obj, "data");
  if (data.is_object()) {
    for (auto it = data.begin(); it != data.end(); ++it) {
      if (!it.value().is_string()) continue;
      std::string v = it.value().get<std::string>();
      if (kind == "Secret") {
        std::string decoded;
        if (!base64Decode(v, &decoded)) continue;  // validation refused it on write
        v = decoded;
      }
      out[it.key()] = v;
    }
  }
  const json& bin = valueAt(obj, "binaryData");
  if (with_binary && kind == "ConfigMap" && bin.is_object()) {
    for (auto it = bin.begin(); it != bin.end(); ++it) {
      std::string decoded;
      if (it.value().is_string() && base64Decode(it.value().get<std::string>(), &decoded))
        out[it.key()] = decoded;
    }
  }
  return out;
}

std::string lowerKind(const std::string& kind) {
  return kind == "Secret" ? "secret" : "configmap";
}

// A projected path: relative, no empty or ".." element, not starting with "..".
bool safeRelativePath(const std::string& p) {
  if (p.empty() || p[0] == '/' || p.rfind("..", 0) == 0 || p.size() > 4096) return false;
  size_t start = 0;
  while (start <= p.size()) {
    size_t slash = p.find('/', start);
    std::string part = p.substr(start, slash == std::string::npos ? std::string::npos : slash - start);
    if (part.empty() || part == "..") return false;
    if (slash == std::string::npos) break;
    start = slash + 1;
  }
  return true;
}

struct Resolver {
  const std::string& ns;
  const ObjectLookup& lookup;
  PodObjectsError* error;
  const TokenIssuer& issue_token;

  bool fail(const std::string& reason, const std::string& message) {
    error->reason = reason;
    error->message = message;
    return false;
  }

  // Adds the files of one secret/configMap source (a volume or a projection).
  bool project(const std::string& kind, const json& src, const std::string& name, int default_mode,
               const std::string& volume, std::vector<ProjectedFile>* files) {
    std::optional<json> obj = name.empty() ? std::nullopt : lookup(kind, name);
    std::string prefix = "MountVolume.SetUp failed for volume \"" + volume + "\" : ";
    if (!obj) {
      if (optional(src)) return true;
      return fail("FailedMount", prefix + lowerKind(kind) + " \"" + name + "\" not found");
    }
    std::map<std::string, std::string> kv = values(kind, *obj, true);
    const json& items = valueAt(src, "items");
    if (items.is_array() && !items.empty()) {
      for (const json& item : items) {
        std::string key = str(item, "key"), path = str(item, "path");
        if (!safeRelativePath(path))
          return fail("FailedMount", prefix + "invalid path \"" + path + "\" for key " + key);
        auto it = kv.find(key);
        if (it == kv.end()) {
          if (optional(src)) continue;
          return fail("FailedMount",
                      prefix +
                          (kind == "Secret" ? "references non-existent secret key: "
                                            : "configmap references non-existent config key: ") +
                          key);
        }
        const json& mode = valueAt(item, "mode");
        files->push_back(
            {path, it->second, mode.is_number_integer() ? mode.get<int>() & 0777 : default_mode});
      }
      return true;
    }
    for (const auto& [key, value] : kv) {
      if (!safeRelativePath(key)) continue;
      files->push_back({key, value, default_mode});
    }
    return true;
  }

  bool volumes(const json& spec, PodObjects* out) {
    const json& vols = valueAt(spec, "volumes");
    if (!vols.is_array()) return true;
    for (const json& v : vols) {
      std::string vname = str(v, "name");
      auto modeOf = [](const json& src) {
        const json& m = valueAt(src, "defaultMode");
        return m.is_number_integer() ? m.get<int>() & 0777 : 0644;
      };
      std::vector<ProjectedFile> files;
      if (const json& s = valueAt(v, "secret"); s.is_object()) {
        if (!project("Secret", s, str(s, "secretName"), modeOf(s), vname, &files)) return false;
      } else if (const json& c = valueAt(v, "configMap"); c.is_object()) {
        if (!project("ConfigMap", c, str(c, "name"), modeOf(c), vname, &files)) return false;
      } else if (const json& p = valueAt(v, "projected"); p.is_object()) {
        int mode = modeOf(p);
        const json& sources = valueAt(p, "sources");
        for (const json& src : sources.is_array() ? sources : json::array()) {
          if (const json& s2 = valueAt(src, "secret"); s2.is_object()) {
            if (!project("Secret", s2, str(s2, "name"), mode, vname, &files)) return false;
          } else if (const json& c2 = valueAt(src, "configMap"); c2.is_object()) {
            if (!project("ConfigMap", c2, str(c2, "name"), mode, vname, &files)) return false;
          } else if (const json& t = valueAt(src, "serviceAccountToken"); t.is_object()) {
            std::string prefix = "MountVolume.SetUp failed for volume \"" + vname + "\" : ";
            std::string path = str(t, "path");
            if (!safeRelativePath(path))
              return fail("FailedMount", prefix + "invalid token path \"" + path + "\"");
            if (!issue_token) return fail("FailedMount", prefix + "service account tokens are not available");
            const json& exp = valueAt(t, "expirationSeconds");
            std::string sa = str(spec, "serviceAccountName");
            auto token = issue_token(ns, sa.empty() ? "default" : sa, str(t, "audience"),
                                     exp.is_number_integer() ? exp.get<int64_t>() : 3600);
            if (!token.isOk()) return fail("FailedMount", prefix + token.status().message());
            files.push_back({path, *token, mode});
          } else {
            return fail("FailedMount",
                        "MountVolume.SetUp failed for volume \"" + vname +
                            "\" : only secret, configMap and serviceAccountToken projections are "
                            "supported by knap");
          }
        }
      } else {
        continue;  // emptyDir and the rest are the OCI spec's business
      }
      out->volumes[vname] = std::move(files);
    }
    return true;
  }

  bool env(const json& container, PodObjects* out) {
    PodObjects::ContainerEnv ce;
    const json& from = valueAt(container, "envFrom");
    for (const json& e : from.is_array() ? from : json::array()) {
      std::string prefix = str(e, "prefix");
      const char* kind = valueAt(e, "secretRef").is_object() ? "Secret" : "ConfigMap";
      const json& ref = valueAt(e, kind == std::string("Secret") ? "secretRef" : "configMapRef");
      if (!ref.is_object()) continue;
      std::string name = str(ref, "name");
      std::optional<json> obj = lookup(kind, name);
      if (!obj) {
        if (optional(ref)) continue;
        return fail("CreateContainerConfigError", lowerKind(kind) + " \"" + name + "\" not found");
      }
      for (const auto& [k, v] : values(kind, *obj, false)) {
        if (isEnvVarName(prefix + k)) ce.from_env_from.emplace_back(prefix + k, v);
      }
    }
    const json& env = valueAt(container, "env");
    for (const json& e : env.is_array() ? env : json::array()) {
      const json& vf = valueAt(e, "valueFrom");
      const char* kind = nullptr;
      const json* ref = nullptr;
      if (valueAt(vf, "secretKeyRef").is_object()) {
        kind = "Secret";
        ref = &valueAt(vf, "secretKeyRef");
      } else if (valueAt(vf, "configMapKeyRef").is_object()) {
        kind = "ConfigMap";
        ref = &valueAt(vf, "configMapKeyRef");
      }
      if (kind == nullptr) continue;
      std::string name = str(*ref, "name"), key = str(*ref, "key");
      std::optional<json> obj = lookup(kind, name);
      if (!obj) {
        if (optional(*ref)) continue;
        return fail("CreateContainerConfigError", lowerKind(kind) + " \"" + name + "\" not found");
      }
      auto kv = values(kind, *obj, false);
      auto it = kv.find(key);
      if (it == kv.end()) {
        if (optional(*ref)) continue;
        return fail("CreateContainerConfigError",
                    "couldn't find key " + key + " in " + kind + " " + ns + "/" + name);
      }
      ce.from_refs[str(e, "name")] = it->second;
    }
    out->env[str(container, "name")] = std::move(ce);
    return true;
  }
};

}  // namespace

bool isEnvVarName(const std::string& name) {
  if (name.empty()) return false;
  for (size_t i = 0; i < name.size(); ++i) {
    unsigned char c = static_cast<unsigned char>(name[i]);
    bool ok = std::isalpha(c) || c == '-' || c == '.' || c == '_' || (i > 0 && std::isdigit(c));
    if (!ok) return false;
  }
  return true;
}

std::optional<PodObjects> resolvePodObjects(const json& spec, const std::string& ns,
                                            const ObjectLookup& lookup, PodObjectsError* error,
                                            const TokenIssuer& issue_token) {
  PodObjectsError ignored;
  Resolver r{ns, lookup, error ? error : &ignored, issue_token};
  PodObjects out;
  for (const char* list : {"initContainers", "containers"}) {
    const json& cs = valueAt(spec, list);
    for (const json& c : cs.is_array() ? cs : json::array()) {
      if (!r.env(c, &out)) return std::nullopt;
    }
  }
  if (!r.volumes(spec, &out)) return std::nullopt;
  return out;
}

bool readsObjects(const json& spec) {
  for (const char* list : {"initContainers", "containers"}) {
    const json& cs = valueAt(spec, list);
    for (const json& c : cs.is_array() ? cs : json::array()) {
      if (valueAt(c, "envFrom").is_array() && !valueAt(c, "envFrom").empty()) return true;
      const json& env = valueAt(c, "env");
      for (const json& e : env.is_array() ? env : json::array()) {
        const json& vf = valueAt(e, "valueFrom");
        if (valueAt(vf, "secretKeyRef").is_object() || valueAt(vf, "configMapKeyRef").is_object())
          return true;
      }
    }
  }
  const json& vols = valueAt(spec, "volumes");
  for (const json& v : vols.is_array() ? vols : json::array()) {
    if (valueAt(v, "secret").is_object() || valueAt(v, "configMap").is_object() ||
        valueAt(v, "projected").is_object())
      return true;
  }
  return false;
}

}  // namespace knap::api
