// ContainerdClient: knap's typed client for containerd 1.6 over its gRPC API.
//
// Follows the call protocol in docs CONTAINERD-CLIENT.md (gotchas G1-G16 are
// handled here so callers do not have to: content-write draining, runc
// options type_url, spec type_url, event payload decoding, filter quoting
// helpers). Generated protobuf types never appear in this header: callers see
// the plain domain structs below.
//
// Thread safety: a ContainerdClient is immutable after construction and safe
// to use from any number of threads; copies share one gRPC channel.
// withLease()/withNamespace() return cheap copies that carry a different
// header. Every call except waitTask() and event streams has a deadline
// (Options::call_timeout). Every error is a knap::Status converted from the
// grpc::Status at the call site: NOT_FOUND -> kNotFound, ALREADY_EXISTS ->
// kAlreadyExists, FAILED_PRECONDITION -> kFailedPrecondition,
// INVALID_ARGUMENT/OUT_OF_RANGE -> kInvalidArgument, UNAVAILABLE ->
// kUnavailable, DEADLINE_EXCEEDED -> kDeadlineExceeded, UNKNOWN (runc/shim
// failures) and the rest -> kInternal; the message names the operation.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/clock.h"
#include "common/status.h"
#include "oci/oci_layout.h"

namespace knap::containerd {

using Labels = std::map<std::string, std::string>;

inline constexpr char kDefaultSocket[] = "unix:///run/containerd/containerd.sock";
inline constexpr char kRuncRuntime[] = "io.containerd.runc.v2";
inline constexpr char kGcExpireLabel[] = "containerd.io/gc.expire";

struct Mount {
  std::string type;
  std::string source;
  std::string target;
  std::vector<std::string> options;
};

struct VersionInfo {
  std::string version;
  std::string revision;
};

struct ContentInfo {
  std::string digest;
  int64_t size = 0;
  Labels labels;
};

struct ImageRecord {
  std::string name;
  oci::Descriptor target;  // normally the manifest
  Labels labels;
  WallTime created_at{};  // read back from containerd (ignored by create/update)
  WallTime updated_at{};
};

enum class SnapshotKind { kUnknown, kView, kActive, kCommitted };

struct SnapshotInfo {
  std::string name;
  std::string parent;
  SnapshotKind kind = SnapshotKind::kUnknown;
  Labels labels;
};

// Options of the io.containerd.runc.v2 shim (runc/options/oci.proto). Note
// G16: task options replace the container's runtime options wholesale.
struct RuncOptions {
  std::string binary_name;  // runc binary; empty = "runc"
  std::string root;         // runc --root
  bool systemd_cgroup = false;
  bool no_pivot_root = false;
};

struct ContainerRecord {
  std::string id;
  Labels labels;
  std::string image;  // informational; never followed by GC
  std::string runtime = kRuncRuntime;
  std::optional<RuncOptions> runtime_options;
  std::string spec_json;    // OCI runtime spec as JSON
  std::string snapshotter;  // empty on create = the client's snapshotter
  std::string snapshot_key;
};

enum class TaskStatus { kUnknown, kCreated, kRunning, kStopped, kPaused, kPausing };
const char* taskStatusName(TaskStatus s);

// Tasks.Get/List entry. exit_status/exited_at are meaningful once STOPPED.
struct TaskInfo {
  std::string container_id;
  uint32_t pid = 0;
  TaskStatus status = TaskStatus::kUnknown;
  uint32_t exit_status = 0;
  WallTime exited_at{};
  std::string stdin_path, stdout_path, stderr_path;
};

struct ExitInfo {
  uint32_t pid = 0;          // only from deleteTask
  uint32_t exit_status = 0;  // 128+signal when killed by a signal
  WallTime exited_at{};
};

struct TaskCreateRequest {
  std::string container_id;
  std::vector<Mount> rootfs;  // from snapshotMounts(); must not be empty (G11)
  // Absolute paths of existing regular files (the shim opens them O_APPEND
  // without O_CREAT; G4), or "" for /dev/null. Create them first with
  // prepareLogFile() (below). stdin "" gives the process /dev/null (EOF).
  std::string stdin_path;
  std::string stdout_path;
  std::string stderr_path;
  std::optional<RuncOptions> options;  // replaces the container's (G16)
};

// Tasks.Exec: an extra process in a running task (exec probes). The process
// spec is an OCI runtime-spec "process" object as JSON (args, env, cwd, user,
// capabilities...), normally the container's own with other args. Stdio paths
// follow TaskCreateRequest's rules ("" = /dev/null).
struct ExecProcessRequest {
  std::string container_id;
  std::string exec_id;  // unique among the task's live exec processes
  std::string process_json;
  std::string stdout_path;
  std::string stderr_path;
};

// One event from Events.Subscribe. Task events (containerd.events.Task*) are
// decoded into the task fields; others keep only the raw payload.
struct Event {
  WallTime timestamp{};
  std::string ns;
  std::string topic;     // "/tasks/exit", ...
  std::string type_url;  // "containerd.events.TaskExit" (no type.googleapis.com/ prefix, G10)
  std::string payload;   // serialized event message
  std::string container_id;
  std::string exec_id;  // TaskExit.id: equals container_id for the init process
  uint32_t pid = 0;
  uint32_t exit_status = 0;
  WallTime exited_at{};
};

// A live Events.Subscribe stream. next() blocks; cancel() may be called from
// any thread to make a blocked next() return false.
class EventStream {
 public:
  virtual ~EventStream() = default;
  // Waits for the next event; false when the stream ended or was cancelled
  // (then finish() says why).
  virtual bool next(Event* out) = 0;
  virtual void cancel() = 0;
  // After next() returned false: OK if cancelled, otherwise the stream error.
  virtual Status finish() = 0;
};

// Quotes a filter value as containerd's filter grammar requires (G9): label
// keys with '.' or '/', values starting with '/'.
std::string quoteFilterValue(std::string_view v);
// `labels."<key>"==<value>` with both parts quoted.
std::string labelFilter(std::string_view key, std::string_view value);

// Lets another thread abandon a blocking call (waitTask). Thread-safe; a
// cancel() before the call starts makes the call return at once.
class CallCanceller {
 public:
  void cancel();
  bool cancelled() const;

 private:
  friend class ContainerdClient;
  // Registers the running call's grpc::ClientContext (nullptr when done);
  // false if already cancelled.
  bool attach(void* grpc_context);
  mutable std::mutex mu_;
  void* context_ = nullptr;
  bool cancelled_ = false;
};

class ContainerdClient {
 public:
  struct Options {
    std::string address = kDefaultSocket;
    std::string ns = "knap";
    std::string snapshotter = "overlayfs";
    Duration call_timeout = std::chrono::seconds(30);
  };

  // Creates the channel lazily (connects on the first call); never fails.
  // `time` (which must outlive the client and its copies) dates the calls'
  // deadlines and lease expiries: daemon/ or a program's main hands it down.
  ContainerdClient(Options options, const TimeSource& time);
  ContainerdClient(const ContainerdClient&) = default;
  ContainerdClient& operator=(const ContainerdClient&) = default;
  ~ContainerdClient();

  // A copy whose calls carry `containerd-lease: <lease>` ("" = none).
  ContainerdClient withLease(std::string lease) const;
  ContainerdClient withNamespace(std::string ns) const;
  const std::string& ns() const { return options_.ns; }
  const std::string& lease() const { return lease_; }
  const std::string& snapshotter() const { return options_.snapshotter; }

  // Waits up to `timeout` for the socket to accept a connection and answer
  // Version; kUnavailable when containerd is not there.
  StatusOr<VersionInfo> version(Duration timeout = std::chrono::seconds(5)) const;

  // --- leases (§7) ---
  // Creates a lease (random id when `id` is empty) that expires after
  // `expire_after` (0 = never); returns its id.
  StatusOr<std::string> createLease(const std::string& id, Duration expire_after, Labels labels = {}) const;
  // `sync` waits for the garbage collection the deletion triggers.
  Status deleteLease(const std::string& id, bool sync = false) const;
  // Leases matching `filter` (containerd filter syntax, e.g.
  // `labels."knap.dev/pod"`; "" = all): id and labels.
  StatusOr<std::vector<std::pair<std::string, Labels>>> listLeases(const std::string& filter = "") const;

  // --- content (§2.2) ---
  // Reads `n` bytes at `offset` of the blob being written; may return fewer
  // only at the end.
  using BlobSource = std::function<StatusOr<std::string>(uint64_t offset, size_t n)>;
  // STAT / WRITE (1 MiB chunks, resuming at the server's offset) / COMMIT with
  // `labels`, draining the stream before Finish (G1). A blob that already
  // exists counts as success; its labels are then set with Content.Update.
  // kFailedPrecondition on digest/size mismatch (the ingest is aborted, G12).
  // `ref` names the ingest (default: unique per call); pass a stable ref to
  // resume an interrupted upload.
  Status writeContent(const oci::Descriptor& desc, const BlobSource& source, const Labels& labels = {},
                      const std::string& ref = "") const;
  Status writeContent(const oci::Descriptor& desc, std::string_view data, const Labels& labels = {}) const;
  StatusOr<ContentInfo> contentInfo(const std::string& digest) const;
  // Sets (or with an empty value, removes) only the given labels.
  Status updateContentLabels(const std::string& digest, const Labels& labels) const;
  // The whole blob; kResourceExhausted if larger than max_bytes.
  StatusOr<std::string> readContent(const std::string& digest, int64_t max_bytes = 16 << 20) const;
  Status deleteContent(const std::string& digest) const;

  // --- images (§2.3) ---
  StatusOr<ImageRecord> getImage(const std::string& name) const;
  StatusOr<std::vector<ImageRecord>> listImages(const std::vector<std::string>& filters = {}) const;
  Status createImage(const ImageRecord& image) const;  // kAlreadyExists if taken
  Status updateImage(const ImageRecord& image) const;  // target + labels; kNotFound if absent
  Status deleteImage(const std::string& name, bool sync = false) const;

  // --- snapshots (client's snapshotter) ---
  StatusOr<SnapshotInfo> statSnapshot(const std::string& key) const;
  StatusOr<std::vector<Mount>> prepareSnapshot(const std::string& key, const std::string& parent,
                                               const Labels& labels = {}) const;
  StatusOr<std::vector<Mount>> snapshotMounts(const std::string& key) const;
  Status commitSnapshot(const std::string& name, const std::string& key, const Labels& labels = {}) const;
  Status removeSnapshot(const std::string& key) const;
  StatusOr<std::vector<SnapshotInfo>> listSnapshots(const std::vector<std::string>& filters = {}) const;

  // --- diff ---
  // Applies a layer blob onto mounts; returns the applied (uncompressed)
  // descriptor, whose digest must equal the layer's diff_id.
  StatusOr<oci::Descriptor> applyDiff(const oci::Descriptor& layer, const std::vector<Mount>& mounts) const;

  // --- containers (§3.1) ---
  Status createContainer(const ContainerRecord& c) const;  // kAlreadyExists on duplicate id
  StatusOr<ContainerRecord> getContainer(const std::string& id) const;
  // Filters per §6 (use labelFilter()); several strings are ORed.
  StatusOr<std::vector<ContainerRecord>> listContainers(const std::vector<std::string>& filters = {}) const;
  // Never call while the container's task exists (G6).
  Status deleteContainer(const std::string& id) const;

  // --- tasks (§3) ---
  StatusOr<uint32_t> createTask(const TaskCreateRequest& req) const;  // returns the pid
  StatusOr<uint32_t> startTask(const std::string& container_id) const;
  // Blocks until the task exits, with no deadline: call it on its own thread
  // before startTask() (§3.3). If `canceller` is given, canceller->cancel()
  // from another thread abandons the wait (returns kUnavailable).
  StatusOr<ExitInfo> waitTask(const std::string& container_id, CallCanceller* canceller = nullptr) const;
  // kNotFound "process already finished" for a stopped task.
  Status killTask(const std::string& container_id, int signal, bool all = false) const;
  // Returns the exit status; kInternal for a running task (G7).
  StatusOr<ExitInfo> deleteTask(const std::string& container_id) const;
  StatusOr<TaskInfo> getTask(const std::string& container_id) const;
  StatusOr<std::vector<TaskInfo>> listTasks() const;
  Status pauseTask(const std::string& container_id) const;
  Status resumeTask(const std::string& container_id) const;

  // --- exec processes (Tasks.Exec/Start/Wait/Kill/DeleteProcess with exec_id) ---
  // Creates the process (not started). kAlreadyExists for a duplicate exec id;
  // kNotFound when the task does not exist.
  Status execProcess(const ExecProcessRequest& req) const;
  StatusOr<uint32_t> startProcess(const std::string& container_id, const std::string& exec_id) const;
  // Waits up to `timeout` for the exec process to exit; kDeadlineExceeded
  // while it still runs. After the exit (before deleteProcess) it returns the
  // stored status at once.
  StatusOr<ExitInfo> waitProcess(const std::string& container_id, const std::string& exec_id,
                                 Duration timeout) const;
  Status killProcess(const std::string& container_id, const std::string& exec_id, int signal) const;
  // Removes an exited exec process from the task; returns its exit status.
  StatusOr<ExitInfo> deleteProcess(const std::string& container_id, const std::string& exec_id) const;

  // --- events (§6) ---
  // Subscribes to events of this client's namespace matching any of
  // `filters` (empty = all). Returns only once the subscription is live on
  // the server (confirmed with a sync event published to a private topic), so
  // an event caused by a later call cannot be missed.
  StatusOr<std::unique_ptr<EventStream>> subscribe(const std::vector<std::string>& filters = {}) const;

 private:
  struct Stubs;
  Options options_;
  const TimeSource* time_;
  std::string lease_;
  std::shared_ptr<Stubs> stubs_;
};

// Creates (or truncates when `truncate`) a regular file for task stdio with
// mode 0640, making parent directories; kInternal on failure.
Status prepareLogFile(const std::string& path, bool truncate = false);

}  // namespace knap::containerd
