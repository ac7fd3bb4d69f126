#include "tools/knap/pods_cmd.h"

#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <sstream>
#include <thread>

#include <nlohmann/json.hpp>

#include "common/clock.h"
#include "common/pod_logs.h"

#ifdef KNAP_CLI_HAVE_CONTAINERD
#include "runtime/containerd/image_import.h"
#endif

namespace knap::cli {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

struct LogFile {
  std::string label;  // pod id (+ stream)
  std::string path;
  std::streamoff offset = 0;
};

// Prints what was appended to `f` since the last call (from the start of the
// file after a copy-truncate rotation).
void pump(LogFile& f, bool prefix) {
  std::ifstream in(f.path, std::ios::binary);
  if (!in) return;
  in.seekg(0, std::ios::end);
  std::streamoff size = in.tellg();
  if (size < f.offset) f.offset = 0;  // rotated
  in.seekg(f.offset);
  std::string line;
  while (std::getline(in, line)) {
    if (in.eof()) {  // partial last line: wait for the rest
      break;
    }
    if (prefix) std::cout << "[" << f.label << "] ";
    std::cout << line << "\n";
    f.offset = in.tellg();
  }
  std::cout.flush();
}

}  // namespace

int cmdLogs(const std::vector<std::string>& args) {
  std::string name, ns = "default", data_dir = "/var/lib/knap", container;
  bool follow = false, all_containers = false;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= args.size()) {
        std::cerr << "Error: " << a << " needs a value\n";
        std::exit(2);
      }
      return args[++i];
    };
    if (a == "-f" || a == "--follow")
      follow = true;
    else if (a == "-n" || a == "--namespace")
      ns = value();
    else if (a == "--data-dir")
      data_dir = value();
    else if (a == "-c" || a == "--container")
      container = value();
    else if (a == "--all-containers")
      all_containers = true;
    else if (!a.empty() && a[0] == '-') {
      std::cerr << "Error: unknown flag " << a
                << "\nusage: knap logs SERVICE|REVISION [-f] [-n NS] [-c CONTAINER | --all-containers] "
                   "[--data-dir DIR]\n";
      return 2;
    } else if (name.empty())
      name = a;
    else {
      std::cerr << "Error: one SERVICE or REVISION name\n";
      return 2;
    }
  }
  if (name.empty()) {
    std::cerr << "usage: knap logs SERVICE|REVISION [-f] [-n NS] [-c CONTAINER | --all-containers] "
                 "[--data-dir DIR]\n";
    return 2;
  }
  auto collect = [&]() {
    std::map<std::string, std::vector<LogFile>> out;  // by pod id
    for (const PodLogFiles& p : findPodLogs(data_dir, ns, name)) {
      // The serving container logs in the pod directory, sidecars under
      // containers/<name>/ (multi-container pods).
      std::vector<ContainerLogFiles> chosen;
      if (container.empty() || all_containers || container == p.container)
        chosen.push_back({p.container, p.stdout_path, p.stderr_path});
      if (!container.empty() || all_containers) {
        for (const ContainerLogFiles& c : p.sidecars) {
          if (all_containers || c.name == container) chosen.push_back(c);
        }
      }
      auto& files = out[p.pod];  // the pod exists even when that container does not
      for (const ContainerLogFiles& c : chosen) {
        std::string label = p.pod + (all_containers && !c.name.empty() ? "/" + c.name : "");
        files.push_back(LogFile{label + " stdout", c.stdout_path, 0});
        files.push_back(LogFile{label + " stderr", c.stderr_path, 0});
      }
    }
    return out;
  };
  auto pods = collect();
  if (pods.empty() && !follow) {
    std::error_code ec;
    if (!fs::exists(data_dir + "/pods", ec)) {
      std::cerr << "Error: " << data_dir << "/pods not found (is --data-dir right, and may you read it?)\n";
    } else {
      std::cerr << "Error: no pods of service or revision \"" << name << "\" in namespace " << ns
                << " (pods run only while a revision is scaled up)\n";
    }
    return 1;
  }
  if (!container.empty()) {
    bool found = false;
    for (const auto& [pod, files] : pods) found = found || !files.empty();
    if (!found && !pods.empty()) {
      std::cerr << "Error: no container \"" << container << "\" in the pods of \"" << name << "\"\n";
      return 1;
    }
  }
  bool prefix = pods.size() > 1 || follow || all_containers;
  for (auto& [pod, files] : pods) {
    for (auto& f : files) pump(f, prefix);
  }
  if (!follow) return 0;
  for (;;) {
    std::this_thread::sleep_for(std::chrono::milliseconds(250));
    auto now = collect();
    for (auto& [pod, files] : now) {
      if (!pods.count(pod)) pods[pod] = files;  // a new pod: from its start
    }
    for (auto it = pods.begin(); it != pods.end();) {
      if (!now.count(it->first)) {
        it = pods.erase(it);  // pod gone
        continue;
      }
      for (auto& f : it->second) pump(f, true);
      ++it;
    }
  }
}

int cmdImage(const std::vector<std::string>& args) {
  const char* usage =
      "usage: knap image import FILE [--name NAME] [--containerd-socket PATH] [--namespace NS]\n";
  if (args.empty() || args[0] != "import") {
    std::cerr << usage;
    return 2;
  }
  std::string file, name, socket = "/run/containerd/containerd.sock", ns = "knap";
  for (size_t i = 1; i < args.size(); ++i) {
    const std::string& a = args[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= args.size()) {
        std::cerr << "Error: " << a << " needs a value\n";
        std::exit(2);
      }
      return args[++i];
    };
    if (a == "--name")
      name = value();
    else if (a == "--containerd-socket")
      socket = value();
    else if (a == "--namespace" || a == "-n")
      ns = value();
    else if (!a.empty() && a[0] == '-') {
      std::cerr << "Error: unknown flag " << a << "\n" << usage;
      return 2;
    } else if (file.empty())
      file = a;
    else {
      std::cerr << usage;
      return 2;
    }
  }
  if (file.empty()) {
    std::cerr << usage;
    return 2;
  }
#ifdef KNAP_CLI_HAVE_CONTAINERD
  containerd::ContainerdClient::Options o;
  o.address = "unix://" + socket;
  o.ns = ns;
  containerd::ContainerdClient client(o, RealTimeSource::instance());
  containerd::ImportOptions io;
  io.name = name;
  auto r = containerd::importImageArchive(client, fs::absolute(file).string(), io);
  if (!r.isOk()) {
    std::cerr << "Error: import " << file << ": " << r.status().message() << "\n";
    return 1;
  }
  std::cout << "imported " << r->name << " (" << r->manifest_digest << ") into containerd namespace " << ns
            << "\n";
  return 0;
#else
  (void)name;
  std::cerr << "Error: this knap was built without the containerd client\n";
  return 1;
#endif
}

}  // namespace knap::cli
