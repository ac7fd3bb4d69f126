// The files of a pod's secret, configMap and projected volumes on the host,
// written as the kubelet's AtomicWriter lays them out, so that an update
// reaches a running container in one step:
//   <dir>/..2026_12_02_23_30_00.123456789_ab12cd/   the files of one version
//   <dir>/..data -> ..2026_12_02_...                swapped by rename(2)
//   <dir>/<top-level name> -> ..data/<top-level name>
// The directory is bind-mounted read-only into the container; readers of
// <mount>/key see either the old or the new version, never a mix.
//
// Paths are relative, without "..", "." or empty components (api/pod_objects.h
// checks items[].path the same way; this is checked again here). Files get
// their mode; directories 0755. Thread safety: one writer per directory.
#pragma once

#include <string>
#include <vector>

#include "common/status.h"

namespace knap::runtime {

struct VolumeFile {
  std::string path;  // relative: "password", "conf/app.yaml"
  std::string data;
  int mode = 0644;
  bool operator==(const VolumeFile&) const = default;
};

// Writes `files` as the new version of `dir` (created 0755 if missing) and
// removes the previous version. Unchanged content still makes a new version;
// callers compare first (volumeMatches) to avoid needless swaps.
// kInvalidArgument for a bad path; kInternal for file-system errors.
Status writeVolumeAtomically(const std::string& dir, const std::vector<VolumeFile>& files);

// Whether `dir`'s current version holds exactly `files` (paths, bytes, modes).
bool volumeMatches(const std::string& dir, const std::vector<VolumeFile>& files);

}  // namespace knap::runtime
