// `knap logs` and `knap image import`: commands that work on this machine's
// files and containerd directly (not through knapd's API), so they need read
// access to knapd's data dir (logs) and root (image import).
// Single-threaded; called from main().
#pragma once

#include <string>
#include <vector>

namespace knap::cli {

// knap logs SERVICE|REVISION [-f] [-n NS] [-c CONTAINER | --all-containers] [--data-dir DIR]
// Prints the stdout/stderr logs of the pods of a revision (or of every
// revision of a service) from <data-dir>/pods/<pod>/{stdout,stderr}.log, as
// listed by each pod's meta.json: the serving container's by default, the
// sidecar CONTAINER's (<pod>/containers/CONTAINER/) with -c, every
// container's (prefixed "[pod/container stream]") with --all-containers.
// -f follows them. Returns the exit code.
int cmdLogs(const std::vector<std::string>& args);

// knap image import FILE [--name NAME] [--containerd-socket PATH] [--namespace NS]
// Imports an OCI image layout tar into containerd (namespace "knap") so
// revisions can use it. Returns the exit code.
int cmdImage(const std::vector<std::string>& args);

}  // namespace knap::cli
