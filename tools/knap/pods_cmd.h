// `knap logs` and `knap image import`: commands that work on this machine's
// files and containerd directly (not through knapd's API), so they need read
// access to knapd's data dir (logs) and root (image import).
// Single-threaded; called from main().
#pragma once

#include <string>
#include <vector>

namespace knap::cli {

// knap logs SERVICE|REVISION [-f] [-n NS] [--data-dir DIR] [--tail N]
// Prints the stdout/stderr logs of the pods of a revision (or of every
// revision of a service) from <data-dir>/pods/<pod>/{stdout,stderr}.log, as
// listed by each pod's meta.json. -f follows them. Returns the exit code.
int cmdLogs(const std::vector<std::string>& args);

// knap image import FILE [--name NAME] [--containerd-socket PATH] [--namespace NS]
// Imports an OCI image layout tar into containerd (namespace "knap") so
// revisions can use it. Returns the exit code.
int cmdImage(const std::vector<std::string>& args);

}  // namespace knap::cli
