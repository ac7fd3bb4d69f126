// Where a pod's logs are on this machine: knapd's pod runner
// (runtime/runner/containerd_pod_driver.cc) keeps each pod in
// <data-dir>/pods/<pod>/ with meta.json ({"pod", "namespace", "revision",
// "service", ...}) and stdout.log / stderr.log (written by the log driver,
// runtime/logdrain, rotated by copy-truncate). Read by `knap logs`
// (tools/knap/pods_cmd.h) and by the API's Revision log view for the web
// console. Stateless functions; thread-safe.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "common/status.h"

namespace knap {

struct ContainerLogFiles {
  std::string name;
  std::string stdout_path;
  std::string stderr_path;
};

struct PodLogFiles {
  std::string pod;
  std::string revision;
  std::string service;
  std::string container;    // the serving container's name (meta.json "container")
  std::string stdout_path;  // the serving container's logs, in the pod directory
  std::string stderr_path;
  // Sidecars of a multi-container pod: <pod dir>/containers/<name>/, by name.
  std::vector<ContainerLogFiles> sidecars;
};

// The pods in namespace `ns` whose revision or service is `name`, sorted by
// pod name. A pod directory without a readable meta.json is skipped. A
// missing <data_dir>/pods is an empty list.
std::vector<PodLogFiles> findPodLogs(const std::string& data_dir, const std::string& ns,
                                     const std::string& name);

// The end of a log file: at most `max_bytes`, starting after a newline when
// the file is longer (so no partial first line); `truncated` (may be null)
// tells whether earlier bytes were left out. A missing file is "" (a pod that
// has not written yet). Other read errors: kUnavailable naming the file.
StatusOr<std::string> readLogTail(const std::string& path, size_t max_bytes, bool* truncated);

}  // namespace knap
