#include "common/pod_logs.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

namespace knap {

namespace fs = std::filesystem;

std::vector<PodLogFiles> findPodLogs(const std::string& data_dir, const std::string& ns,
                                     const std::string& name) {
  std::vector<PodLogFiles> out;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(data_dir + "/pods", ec)) {
    std::ifstream m(e.path() / "meta.json");
    if (!m) continue;
    nlohmann::json meta = nlohmann::json::parse(m, nullptr, false);
    if (!meta.is_object()) continue;
    auto field = [&](const char* k) {
      auto it = meta.find(k);
      return it != meta.end() && it->is_string() ? it->get<std::string>() : std::string();
    };
    if (field("namespace") != ns) continue;
    std::string revision = field("revision"), service = field("service");
    if (revision != name && service != name) continue;
    std::string pod = field("pod");
    if (pod.empty()) pod = e.path().filename().string();
    PodLogFiles files{pod,
                      revision,
                      service,
                      field("container"),
                      (e.path() / "stdout.log").string(),
                      (e.path() / "stderr.log").string(),
                      {}};
    for (const auto& c : fs::directory_iterator(e.path() / "containers", ec)) {
      files.sidecars.push_back({c.path().filename().string(), (c.path() / "stdout.log").string(),
                                (c.path() / "stderr.log").string()});
    }
    ec.clear();
    std::sort(files.sidecars.begin(), files.sidecars.end(),
              [](const ContainerLogFiles& a, const ContainerLogFiles& b) { return a.name < b.name; });
    out.push_back(std::move(files));
  }
  std::sort(out.begin(), out.end(), [](const PodLogFiles& a, const PodLogFiles& b) { return a.pod < b.pod; });
  return out;
}

StatusOr<std::string> readLogTail(const std::string& path, size_t max_bytes, bool* truncated) {
  if (truncated) *truncated = false;
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    if (errno == ENOENT) return std::string();
    return Status(Code::kUnavailable, "cannot read " + path + ": " + std::strerror(errno));
  }
  in.seekg(0, std::ios::end);
  std::streamoff size = in.tellg();
  if (size < 0) return Status(Code::kUnavailable, "cannot read " + path);
  std::streamoff start =
      size > static_cast<std::streamoff>(max_bytes) ? size - static_cast<std::streamoff>(max_bytes) : 0;
  in.seekg(start);
  std::string text(static_cast<size_t>(size - start), '\0');
  in.read(text.data(), static_cast<std::streamsize>(text.size()));
  text.resize(static_cast<size_t>(in.gcount()));
  if (start > 0) {
    if (truncated) *truncated = true;
    size_t nl = text.find('\n');
    text.erase(0, nl == std::string::npos ? text.size() : nl + 1);
  }
  return text;
}

}  // namespace knap
