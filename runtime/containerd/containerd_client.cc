#include "runtime/containerd/containerd_client.h"

#include <fcntl.h>
#include <grpcpp/grpcpp.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <random>
#include <thread>

#include "common/log.h"
#include "github.com/containerd/containerd/api/events/task.pb.h"
#include "github.com/containerd/containerd/api/services/containers/v1/containers.grpc.pb.h"
#include "github.com/containerd/containerd/api/services/content/v1/content.grpc.pb.h"
#include "github.com/containerd/containerd/api/services/diff/v1/diff.grpc.pb.h"
#include "github.com/containerd/containerd/api/services/events/v1/events.grpc.pb.h"
#include "github.com/containerd/containerd/api/services/images/v1/images.grpc.pb.h"
#include "github.com/containerd/containerd/api/services/leases/v1/leases.grpc.pb.h"
#include "github.com/containerd/containerd/api/services/snapshots/v1/snapshots.grpc.pb.h"
#include "github.com/containerd/containerd/api/services/tasks/v1/tasks.grpc.pb.h"
#include "github.com/containerd/containerd/api/services/version/v1/version.grpc.pb.h"
#include "github.com/containerd/containerd/runtime/v2/runc/options/oci.pb.h"

namespace knap::containerd {

namespace content = ::containerd::services::content::v1;
namespace images = ::containerd::services::images::v1;
namespace snapshots = ::containerd::services::snapshots::v1;
namespace diff = ::containerd::services::diff::v1;
namespace containers = ::containerd::services::containers::v1;
namespace tasks = ::containerd::services::tasks::v1;
namespace leases = ::containerd::services::leases::v1;
namespace events = ::containerd::services::events::v1;
namespace version = ::containerd::services::version::v1;
namespace pbtypes = ::containerd::types;

namespace {

// Exact type URLs containerd's typeurl registry knows (G2, G3).
constexpr char kRuncOptionsTypeUrl[] = "containerd.runc.v1.Options";
constexpr char kSpecTypeUrl[] = "types.containerd.io/opencontainers/runtime-spec/1/Spec";
constexpr char kProcessTypeUrl[] = "types.containerd.io/opencontainers/runtime-spec/1/Process";
constexpr size_t kWriteChunk = 1 << 20;

Status fromGrpc(const grpc::Status& s, std::string_view op) {
  std::string msg = "containerd " + std::string(op) + ": " + s.error_message();
  switch (s.error_code()) {
    case grpc::StatusCode::OK:
      return Status::ok();
    case grpc::StatusCode::NOT_FOUND:
      return {Code::kNotFound, msg};
    case grpc::StatusCode::ALREADY_EXISTS:
      return {Code::kAlreadyExists, msg};
    case grpc::StatusCode::FAILED_PRECONDITION:
      return {Code::kFailedPrecondition, msg};
    case grpc::StatusCode::INVALID_ARGUMENT:
    case grpc::StatusCode::OUT_OF_RANGE:
      return {Code::kInvalidArgument, msg};
    case grpc::StatusCode::UNAVAILABLE:
    case grpc::StatusCode::CANCELLED:
      return {Code::kUnavailable, msg};
    case grpc::StatusCode::DEADLINE_EXCEEDED:
      return {Code::kDeadlineExceeded, msg};
    case grpc::StatusCode::RESOURCE_EXHAUSTED:
      return {Code::kResourceExhausted, msg};
    case grpc::StatusCode::ABORTED:
      return {Code::kConflict, msg};
    case grpc::StatusCode::UNIMPLEMENTED:
      return {Code::kUnsupported, msg};
    default:
      return {Code::kInternal, msg};
  }
}

WallTime fromTimestamp(const google::protobuf::Timestamp& t) {
  return WallTime(std::chrono::duration_cast<WallTime::duration>(std::chrono::seconds(t.seconds()) +
                                                                 std::chrono::nanoseconds(t.nanos())));
}

Mount fromPb(const pbtypes::Mount& m) {
  return {m.type(), m.source(), m.target(), {m.options().begin(), m.options().end()}};
}

void toPb(const Mount& m, pbtypes::Mount* out) {
  out->set_type(m.type);
  out->set_source(m.source);
  out->set_target(m.target);
  for (const auto& o : m.options) out->add_options(o);
}

std::vector<Mount> fromPb(const google::protobuf::RepeatedPtrField<pbtypes::Mount>& ms) {
  std::vector<Mount> out;
  for (const auto& m : ms) out.push_back(fromPb(m));
  return out;
}

oci::Descriptor fromPb(const pbtypes::Descriptor& d) {
  oci::Descriptor out{d.media_type(), d.digest(), d.size(), {}};
  for (const auto& [k, v] : d.annotations()) out.annotations[k] = v;
  return out;
}

void toPb(const oci::Descriptor& d, pbtypes::Descriptor* out) {
  out->set_media_type(d.media_type);
  out->set_digest(d.digest);
  out->set_size(d.size);
  for (const auto& [k, v] : d.annotations) (*out->mutable_annotations())[k] = v;
}

template <typename Map>
Labels labelsOf(const Map& m) {
  return Labels(m.begin(), m.end());
}

template <typename Map>
void setLabels(const Labels& labels, Map* out) {
  for (const auto& [k, v] : labels) (*out)[k] = v;
}

SnapshotInfo fromPb(const snapshots::Info& i) {
  SnapshotInfo out;
  out.name = i.name();
  out.parent = i.parent();
  switch (i.kind()) {
    case snapshots::VIEW:
      out.kind = SnapshotKind::kView;
      break;
    case snapshots::ACTIVE:
      out.kind = SnapshotKind::kActive;
      break;
    case snapshots::COMMITTED:
      out.kind = SnapshotKind::kCommitted;
      break;
    default:
      out.kind = SnapshotKind::kUnknown;
      break;
  }
  out.labels = labelsOf(i.labels());
  return out;
}

void packRuncOptions(const RuncOptions& o, google::protobuf::Any* any) {
  ::containerd::runc::v1::Options pb;
  pb.set_binary_name(o.binary_name);
  pb.set_root(o.root);
  pb.set_systemd_cgroup(o.systemd_cgroup);
  pb.set_no_pivot_root(o.no_pivot_root);
  any->set_type_url(kRuncOptionsTypeUrl);  // not PackFrom: G2
  any->set_value(pb.SerializeAsString());
}

std::optional<RuncOptions> unpackRuncOptions(const google::protobuf::Any& any) {
  if (any.type_url().empty()) return std::nullopt;
  ::containerd::runc::v1::Options pb;
  if (!pb.ParseFromString(any.value())) return std::nullopt;
  return RuncOptions{pb.binary_name(), pb.root(), pb.systemd_cgroup(), pb.no_pivot_root()};
}

ContainerRecord fromPb(const containers::Container& c) {
  ContainerRecord out;
  out.id = c.id();
  out.labels = labelsOf(c.labels());
  out.image = c.image();
  out.runtime = c.runtime().name();
  if (c.runtime().has_options()) out.runtime_options = unpackRuncOptions(c.runtime().options());
  out.spec_json = c.spec().value();
  out.snapshotter = c.snapshotter();
  out.snapshot_key = c.snapshot_key();
  return out;
}

TaskStatus fromPb(::containerd::v1::types::Status s) {
  switch (s) {
    case ::containerd::v1::types::CREATED:
      return TaskStatus::kCreated;
    case ::containerd::v1::types::RUNNING:
      return TaskStatus::kRunning;
    case ::containerd::v1::types::STOPPED:
      return TaskStatus::kStopped;
    case ::containerd::v1::types::PAUSED:
      return TaskStatus::kPaused;
    case ::containerd::v1::types::PAUSING:
      return TaskStatus::kPausing;
    default:
      return TaskStatus::kUnknown;
  }
}

TaskInfo fromPb(const ::containerd::v1::types::Process& p) {
  TaskInfo t;
  // containerd 1.6 fills only `id` (= the container id for init processes),
  // not container_id, in Tasks.Get/List (services/tasks/local.go).
  t.container_id = p.container_id().empty() ? p.id() : p.container_id();
  t.pid = p.pid();
  t.status = fromPb(p.status());
  t.exit_status = p.exit_status();
  if (p.has_exited_at()) t.exited_at = fromTimestamp(p.exited_at());
  t.stdin_path = p.stdin();
  t.stdout_path = p.stdout();
  t.stderr_path = p.stderr();
  return t;
}

std::string randomHex(size_t n) {
  static thread_local std::mt19937_64 rng{std::random_device{}()};
  static const char* kHex = "0123456789abcdef";
  std::string out;
  for (size_t i = 0; i < n; ++i) out.push_back(kHex[rng() & 15]);
  return out;
}

}  // namespace

// ------------------------------------------------------------------ helpers

const char* taskStatusName(TaskStatus s) {
  switch (s) {
    case TaskStatus::kCreated:
      return "CREATED";
    case TaskStatus::kRunning:
      return "RUNNING";
    case TaskStatus::kStopped:
      return "STOPPED";
    case TaskStatus::kPaused:
      return "PAUSED";
    case TaskStatus::kPausing:
      return "PAUSING";
    default:
      return "UNKNOWN";
  }
}

std::string quoteFilterValue(std::string_view v) {
  std::string out = "\"";
  for (char c : v) {
    if (c == '"' || c == '\\') out.push_back('\\');
    out.push_back(c);
  }
  out.push_back('"');
  return out;
}

std::string labelFilter(std::string_view key, std::string_view value) {
  return "labels." + quoteFilterValue(key) + "==" + quoteFilterValue(value);
}

Status prepareLogFile(const std::string& path, bool truncate) {
  if (path.empty() || path[0] != '/') return invalidArgument("log file path must be absolute: " + path);
  std::error_code ec;
  std::filesystem::create_directories(std::filesystem::path(path).parent_path(), ec);
  if (ec) return internalError("create directory for " + path + ": " + ec.message());
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC | (truncate ? O_TRUNC : 0), 0640);
  if (fd < 0) return internalError("create " + path + ": " + strerror(errno));
  ::close(fd);
  return Status::ok();
}

void CallCanceller::cancel() {
  std::lock_guard<std::mutex> l(mu_);
  cancelled_ = true;
  if (context_ != nullptr) static_cast<grpc::ClientContext*>(context_)->TryCancel();
}

bool CallCanceller::cancelled() const {
  std::lock_guard<std::mutex> l(mu_);
  return cancelled_;
}

bool CallCanceller::attach(void* grpc_context) {
  std::lock_guard<std::mutex> l(mu_);
  context_ = grpc_context;
  return !cancelled_;
}

// ------------------------------------------------------------------ client

struct ContainerdClient::Stubs {
  std::shared_ptr<grpc::Channel> channel;
  std::unique_ptr<version::Version::Stub> version;
  std::unique_ptr<leases::Leases::Stub> leases;
  std::unique_ptr<content::Content::Stub> content;
  std::unique_ptr<images::Images::Stub> images;
  std::unique_ptr<snapshots::Snapshots::Stub> snapshots;
  std::unique_ptr<diff::Diff::Stub> diff;
  std::unique_ptr<containers::Containers::Stub> containers;
  std::unique_ptr<tasks::Tasks::Stub> tasks;
  std::unique_ptr<events::Events::Stub> events;
};

ContainerdClient::ContainerdClient(Options options, const TimeSource& time)
    : options_(std::move(options)), time_(&time) {
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(16 << 20);  // the server's limit, §1
  args.SetMaxSendMessageSize(16 << 20);
  stubs_ = std::make_shared<Stubs>();
  stubs_->channel = grpc::CreateCustomChannel(options_.address, grpc::InsecureChannelCredentials(), args);
  auto& ch = stubs_->channel;
  stubs_->version = version::Version::NewStub(ch);
  stubs_->leases = leases::Leases::NewStub(ch);
  stubs_->content = content::Content::NewStub(ch);
  stubs_->images = images::Images::NewStub(ch);
  stubs_->snapshots = snapshots::Snapshots::NewStub(ch);
  stubs_->diff = diff::Diff::NewStub(ch);
  stubs_->containers = containers::Containers::NewStub(ch);
  stubs_->tasks = tasks::Tasks::NewStub(ch);
  stubs_->events = events::Events::NewStub(ch);
}

ContainerdClient::~ContainerdClient() = default;

ContainerdClient ContainerdClient::withLease(std::string lease) const {
  ContainerdClient c = *this;
  c.lease_ = std::move(lease);
  return c;
}

ContainerdClient ContainerdClient::withNamespace(std::string ns) const {
  ContainerdClient c = *this;
  c.options_.ns = std::move(ns);
  return c;
}

namespace {

// Fills a ClientContext with the namespace/lease headers and a deadline.
void setup(grpc::ClientContext* ctx, const std::string& ns, const std::string& lease, const TimeSource* time,
           std::optional<Duration> timeout) {
  if (!ns.empty()) ctx->AddMetadata("containerd-namespace", ns);
  if (!lease.empty()) ctx->AddMetadata("containerd-lease", lease);
  if (timeout) {
    ctx->set_deadline(
        std::chrono::time_point_cast<std::chrono::system_clock::duration>(time->now() + *timeout));
  }
}

}  // namespace

#define KNAP_CD_CTX(ctx)   \
  grpc::ClientContext ctx; \
  setup(&ctx, options_.ns, lease_, time_, options_.call_timeout)

StatusOr<VersionInfo> ContainerdClient::version(Duration timeout) const {
  grpc::ClientContext ctx;
  setup(&ctx, "", "", time_, timeout);
  ctx.set_wait_for_ready(true);  // wait for the socket instead of failing fast
  google::protobuf::Empty req;
  version::VersionResponse resp;
  grpc::Status s = stubs_->version->Version(&ctx, req, &resp);
  if (!s.ok()) {
    if (s.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED) {
      return unavailable("containerd version: no answer from " + options_.address + ": " + s.error_message());
    }
    return fromGrpc(s, "version");
  }
  return VersionInfo{resp.version(), resp.revision()};
}

// ------------------------------------------------------------------ leases

StatusOr<std::string> ContainerdClient::createLease(const std::string& id, Duration expire_after,
                                                    Labels labels) const {
  KNAP_CD_CTX(ctx);
  leases::CreateRequest req;
  req.set_id(id.empty() ? "knap-" + randomHex(16) : id);
  if (expire_after.count() > 0)
    labels[kGcExpireLabel] =
        formatRfc3339(time_->now() + std::chrono::duration_cast<WallTime::duration>(expire_after));
  setLabels(labels, req.mutable_labels());
  leases::CreateResponse resp;
  grpc::Status s = stubs_->leases->Create(&ctx, req, &resp);
  if (!s.ok()) return fromGrpc(s, "create lease " + req.id());
  return resp.lease().id();
}

Status ContainerdClient::deleteLease(const std::string& id, bool sync) const {
  KNAP_CD_CTX(ctx);
  leases::DeleteRequest req;
  req.set_id(id);
  req.set_sync(sync);
  google::protobuf::Empty resp;
  return fromGrpc(stubs_->leases->Delete(&ctx, req, &resp), "delete lease " + id);
}

StatusOr<std::vector<std::pair<std::string, Labels>>> ContainerdClient::listLeases(
    const std::string& filter) const {
  KNAP_CD_CTX(ctx);
  leases::ListRequest req;
  if (!filter.empty()) req.add_filters(filter);
  leases::ListResponse resp;
  grpc::Status s = stubs_->leases->List(&ctx, req, &resp);
  if (!s.ok()) return fromGrpc(s, "list leases");
  std::vector<std::pair<std::string, Labels>> out;
  for (const auto& l : resp.leases()) out.emplace_back(l.id(), labelsOf(l.labels()));
  return out;
}

// ------------------------------------------------------------------ content

Status ContainerdClient::writeContent(const oci::Descriptor& desc, const BlobSource& source,
                                      const Labels& labels, const std::string& ref_in) const {
  const std::string op = "write content " + desc.digest;
  // A unique ref per write: two concurrent writers of the same blob would
  // otherwise collide on the ref lock (UNAVAILABLE "ref ... locked"); with
  // separate refs the second simply finds the blob committed.
  const std::string ref = ref_in.empty() ? "knap-" + randomHex(8) + "-" + desc.digest : ref_in;
  grpc::ClientContext ctx;
  // Large blobs need longer than one call timeout; allow 10x.
  setup(&ctx, options_.ns, lease_, time_, options_.call_timeout * 10);
  auto stream = stubs_->content->Write(&ctx);
  content::WriteContentRequest req;
  content::WriteContentResponse resp;

  // Sends `req`, reads one reply. On a failed Read the stream is over: Finish
  // gives the real status (ALREADY_EXISTS for an existing blob).
  auto roundTrip = [&]() -> bool { return stream->Write(req) && stream->Read(&resp); };
  auto finishAfterError = [&]() -> grpc::Status {
    while (stream->Read(&resp)) {
    }  // drain (G1)
    return stream->Finish();
  };

  req.set_action(content::STAT);
  req.set_ref(ref);
  req.set_total(desc.size);
  req.set_expected(desc.digest);
  if (!roundTrip()) {
    grpc::Status s = finishAfterError();
    if (s.error_code() == grpc::StatusCode::ALREADY_EXISTS) {
      // Committed before: COMMIT never runs, so apply the labels by hand (§2.4).
      return labels.empty() ? Status::ok() : updateContentLabels(desc.digest, labels);
    }
    return fromGrpc(s, op + " (stat)");
  }
  uint64_t offset = static_cast<uint64_t>(resp.offset());
  if (offset > static_cast<uint64_t>(desc.size)) offset = 0;  // stale ingest: truncate
  bool truncate = offset == 0 && resp.offset() != 0;
  Status err = Status::ok();
  while (offset < static_cast<uint64_t>(desc.size) || truncate) {
    size_t n =
        static_cast<size_t>(std::min<uint64_t>(kWriteChunk, static_cast<uint64_t>(desc.size) - offset));
    StatusOr<std::string> chunk = source(offset, n);
    if (!chunk.isOk()) {
      err = chunk.status().annotate(op);
      break;
    }
    if (chunk->empty() && n > 0) {
      err = invalidArgument(op + ": source ended at " + std::to_string(offset) + " of " +
                            std::to_string(desc.size));
      break;
    }
    req.Clear();
    req.set_action(content::WRITE);
    req.set_ref(ref);
    req.set_offset(static_cast<int64_t>(offset));
    req.set_data(std::move(chunk).value());
    if (!roundTrip()) return fromGrpc(finishAfterError(), op + " (write)");
    offset = static_cast<uint64_t>(resp.offset());
    truncate = false;
  }
  if (!err.isOk()) {
    stream->WritesDone();
    finishAfterError();
    return err;
  }
  req.Clear();
  req.set_action(content::COMMIT);
  req.set_ref(ref);
  req.set_total(desc.size);
  req.set_offset(desc.size);
  req.set_expected(desc.digest);
  setLabels(labels, req.mutable_labels());
  bool ok = roundTrip();
  stream->WritesDone();
  grpc::Status s = finishAfterError();  // the server repeats the COMMIT reply (G1)
  if (ok && s.ok()) return Status::ok();
  if (s.error_code() == grpc::StatusCode::ALREADY_EXISTS) {
    return labels.empty() ? Status::ok() : updateContentLabels(desc.digest, labels);
  }
  Status result = fromGrpc(s, op + " (commit)");
  if (s.ok()) result = internalError("containerd " + op + ": stream closed without a commit reply");
  // A failed commit leaves the ingest behind (G12).
  grpc::ClientContext actx;
  setup(&actx, options_.ns, lease_, time_, options_.call_timeout);
  content::AbortRequest areq;
  areq.set_ref(ref);
  google::protobuf::Empty aresp;
  stubs_->content->Abort(&actx, areq, &aresp);
  return result;
}

Status ContainerdClient::writeContent(const oci::Descriptor& desc, std::string_view data,
                                      const Labels& labels) const {
  if (static_cast<int64_t>(data.size()) != desc.size) {
    return invalidArgument("write content " + desc.digest + ": data size does not match the descriptor");
  }
  return writeContent(
      desc,
      [data](uint64_t off, size_t n) -> StatusOr<std::string> { return std::string(data.substr(off, n)); },
      labels);
}

StatusOr<ContentInfo> ContainerdClient::contentInfo(const std::string& digest) const {
  KNAP_CD_CTX(ctx);
  content::InfoRequest req;
  req.set_digest(digest);
  content::InfoResponse resp;
  grpc::Status s = stubs_->content->Info(&ctx, req, &resp);
  if (!s.ok()) return fromGrpc(s, "content info " + digest);
  return ContentInfo{resp.info().digest(), resp.info().size(), labelsOf(resp.info().labels())};
}

Status ContainerdClient::updateContentLabels(const std::string& digest, const Labels& labels) const {
  KNAP_CD_CTX(ctx);
  content::UpdateRequest req;
  req.mutable_info()->set_digest(digest);
  for (const auto& [k, v] : labels) {
    if (!v.empty()) (*req.mutable_info()->mutable_labels())[k] = v;
    req.mutable_update_mask()->add_paths("labels." + k);
  }
  content::UpdateResponse resp;
  return fromGrpc(stubs_->content->Update(&ctx, req, &resp), "update labels of " + digest);
}

StatusOr<std::string> ContainerdClient::readContent(const std::string& digest, int64_t max_bytes) const {
  KNAP_ASSIGN_OR_RETURN(ContentInfo info, contentInfo(digest));
  if (info.size > max_bytes) {
    return Status(Code::kResourceExhausted, "containerd read content " + digest + ": " +
                                                std::to_string(info.size) + " bytes exceeds " +
                                                std::to_string(max_bytes));
  }
  KNAP_CD_CTX(ctx);
  content::ReadContentRequest req;
  req.set_digest(digest);
  auto reader = stubs_->content->Read(&ctx, req);
  std::string out;
  out.reserve(static_cast<size_t>(info.size));
  content::ReadContentResponse resp;
  while (reader->Read(&resp)) {
    if (resp.offset() != static_cast<int64_t>(out.size())) {
      ctx.TryCancel();
      while (reader->Read(&resp)) {
      }
      reader->Finish();
      return internalError("containerd read content " + digest + ": out-of-order chunk");
    }
    out += resp.data();
  }
  grpc::Status s = reader->Finish();
  if (!s.ok()) return fromGrpc(s, "read content " + digest);
  if (static_cast<int64_t>(out.size()) != info.size)
    return internalError("containerd read content " + digest + ": short read");
  return out;
}

Status ContainerdClient::deleteContent(const std::string& digest) const {
  KNAP_CD_CTX(ctx);
  content::DeleteContentRequest req;
  req.set_digest(digest);
  google::protobuf::Empty resp;
  return fromGrpc(stubs_->content->Delete(&ctx, req, &resp), "delete content " + digest);
}

// ------------------------------------------------------------------ images

namespace {

ImageRecord fromPb(const images::Image& i) {
  ImageRecord r{i.name(), fromPb(i.target()), labelsOf(i.labels())};
  if (i.has_created_at()) r.created_at = fromTimestamp(i.created_at());
  if (i.has_updated_at()) r.updated_at = fromTimestamp(i.updated_at());
  return r;
}

void toPb(const ImageRecord& r, images::Image* out) {
  out->set_name(r.name);
  toPb(r.target, out->mutable_target());
  setLabels(r.labels, out->mutable_labels());
}

}  // namespace

StatusOr<ImageRecord> ContainerdClient::getImage(const std::string& name) const {
  KNAP_CD_CTX(ctx);
  images::GetImageRequest req;
  req.set_name(name);
  images::GetImageResponse resp;
  grpc::Status s = stubs_->images->Get(&ctx, req, &resp);
  if (!s.ok()) return fromGrpc(s, "get image " + name);
  return fromPb(resp.image());
}

StatusOr<std::vector<ImageRecord>> ContainerdClient::listImages(
    const std::vector<std::string>& filters) const {
  KNAP_CD_CTX(ctx);
  images::ListImagesRequest req;
  for (const auto& f : filters) req.add_filters(f);
  images::ListImagesResponse resp;
  grpc::Status s = stubs_->images->List(&ctx, req, &resp);
  if (!s.ok()) return fromGrpc(s, "list images");
  std::vector<ImageRecord> out;
  for (const auto& i : resp.images()) out.push_back(fromPb(i));
  return out;
}

Status ContainerdClient::createImage(const ImageRecord& image) const {
  KNAP_CD_CTX(ctx);
  images::CreateImageRequest req;
  toPb(image, req.mutable_image());
  images::CreateImageResponse resp;
  return fromGrpc(stubs_->images->Create(&ctx, req, &resp), "create image " + image.name);
}

Status ContainerdClient::updateImage(const ImageRecord& image) const {
  KNAP_CD_CTX(ctx);
  images::UpdateImageRequest req;
  toPb(image, req.mutable_image());
  req.mutable_update_mask()->add_paths("target");
  for (const auto& [k, v] : image.labels) req.mutable_update_mask()->add_paths("labels." + k);
  images::UpdateImageResponse resp;
  return fromGrpc(stubs_->images->Update(&ctx, req, &resp), "update image " + image.name);
}

Status ContainerdClient::deleteImage(const std::string& name, bool sync) const {
  KNAP_CD_CTX(ctx);
  images::DeleteImageRequest req;
  req.set_name(name);
  req.set_sync(sync);
  google::protobuf::Empty resp;
  return fromGrpc(stubs_->images->Delete(&ctx, req, &resp), "delete image " + name);
}

// ------------------------------------------------------------------ snapshots

StatusOr<SnapshotInfo> ContainerdClient::statSnapshot(const std::string& key) const {
  KNAP_CD_CTX(ctx);
  snapshots::StatSnapshotRequest req;
  req.set_snapshotter(options_.snapshotter);
  req.set_key(key);
  snapshots::StatSnapshotResponse resp;
  grpc::Status s = stubs_->snapshots->Stat(&ctx, req, &resp);
  if (!s.ok()) return fromGrpc(s, "stat snapshot " + key);
  return fromPb(resp.info());
}

StatusOr<std::vector<Mount>> ContainerdClient::prepareSnapshot(const std::string& key,
                                                               const std::string& parent,
                                                               const Labels& labels) const {
  KNAP_CD_CTX(ctx);
  snapshots::PrepareSnapshotRequest req;
  req.set_snapshotter(options_.snapshotter);
  req.set_key(key);
  req.set_parent(parent);
  setLabels(labels, req.mutable_labels());
  snapshots::PrepareSnapshotResponse resp;
  grpc::Status s = stubs_->snapshots->Prepare(&ctx, req, &resp);
  if (!s.ok()) return fromGrpc(s, "prepare snapshot " + key);
  return fromPb(resp.mounts());
}

StatusOr<std::vector<Mount>> ContainerdClient::snapshotMounts(const std::string& key) const {
  KNAP_CD_CTX(ctx);
  snapshots::MountsRequest req;
  req.set_snapshotter(options_.snapshotter);
  req.set_key(key);
  snapshots::MountsResponse resp;
  grpc::Status s = stubs_->snapshots->Mounts(&ctx, req, &resp);
  if (!s.ok()) return fromGrpc(s, "snapshot mounts " + key);
  return fromPb(resp.mounts());
}

Status ContainerdClient::commitSnapshot(const std::string& name, const std::string& key,
                                        const Labels& labels) const {
  KNAP_CD_CTX(ctx);
  snapshots::CommitSnapshotRequest req;
  req.set_snapshotter(options_.snapshotter);
  req.set_name(name);
  req.set_key(key);
  setLabels(labels, req.mutable_labels());
  google::protobuf::Empty resp;
  return fromGrpc(stubs_->snapshots->Commit(&ctx, req, &resp), "commit snapshot " + key + " as " + name);
}

Status ContainerdClient::removeSnapshot(const std::string& key) const {
  KNAP_CD_CTX(ctx);
  snapshots::RemoveSnapshotRequest req;
  req.set_snapshotter(options_.snapshotter);
  req.set_key(key);
  google::protobuf::Empty resp;
  return fromGrpc(stubs_->snapshots->Remove(&ctx, req, &resp), "remove snapshot " + key);
}

StatusOr<std::vector<SnapshotInfo>> ContainerdClient::listSnapshots(
    const std::vector<std::string>& filters) const {
  KNAP_CD_CTX(ctx);
  snapshots::ListSnapshotsRequest req;
  req.set_snapshotter(options_.snapshotter);
  for (const auto& f : filters) req.add_filters(f);
  auto reader = stubs_->snapshots->List(&ctx, req);
  std::vector<SnapshotInfo> out;
  snapshots::ListSnapshotsResponse resp;
  while (reader->Read(&resp)) {
    for (const auto& i : resp.info()) out.push_back(fromPb(i));
  }
  grpc::Status s = reader->Finish();
  if (!s.ok()) return fromGrpc(s, "list snapshots");
  return out;
}

// ------------------------------------------------------------------ diff

StatusOr<oci::Descriptor> ContainerdClient::applyDiff(const oci::Descriptor& layer,
                                                      const std::vector<Mount>& mounts) const {
  grpc::ClientContext ctx;
  setup(&ctx, options_.ns, lease_, time_, options_.call_timeout * 10);  // big layers take a while
  diff::ApplyRequest req;
  toPb(layer, req.mutable_diff());
  req.mutable_diff()->clear_annotations();
  for (const auto& m : mounts) toPb(m, req.add_mounts());
  diff::ApplyResponse resp;
  grpc::Status s = stubs_->diff->Apply(&ctx, req, &resp);
  if (!s.ok()) return fromGrpc(s, "apply layer " + layer.digest);
  return fromPb(resp.applied());
}

// ------------------------------------------------------------------ containers

Status ContainerdClient::createContainer(const ContainerRecord& c) const {
  KNAP_CD_CTX(ctx);
  containers::CreateContainerRequest req;
  auto* pc = req.mutable_container();
  pc->set_id(c.id);
  setLabels(c.labels, pc->mutable_labels());
  pc->set_image(c.image);
  pc->mutable_runtime()->set_name(c.runtime);
  if (c.runtime_options) packRuncOptions(*c.runtime_options, pc->mutable_runtime()->mutable_options());
  pc->mutable_spec()->set_type_url(kSpecTypeUrl);  // a JSON value, G3
  pc->mutable_spec()->set_value(c.spec_json);
  if (!c.snapshot_key.empty()) {
    pc->set_snapshotter(c.snapshotter.empty() ? options_.snapshotter : c.snapshotter);
    pc->set_snapshot_key(c.snapshot_key);
  }
  containers::CreateContainerResponse resp;
  return fromGrpc(stubs_->containers->Create(&ctx, req, &resp), "create container " + c.id);
}

StatusOr<ContainerRecord> ContainerdClient::getContainer(const std::string& id) const {
  KNAP_CD_CTX(ctx);
  containers::GetContainerRequest req;
  req.set_id(id);
  containers::GetContainerResponse resp;
  grpc::Status s = stubs_->containers->Get(&ctx, req, &resp);
  if (!s.ok()) return fromGrpc(s, "get container " + id);
  return fromPb(resp.container());
}

StatusOr<std::vector<ContainerRecord>> ContainerdClient::listContainers(
    const std::vector<std::string>& filters) const {
  KNAP_CD_CTX(ctx);
  containers::ListContainersRequest req;
  for (const auto& f : filters) req.add_filters(f);
  containers::ListContainersResponse resp;
  grpc::Status s = stubs_->containers->List(&ctx, req, &resp);
  if (!s.ok()) return fromGrpc(s, "list containers");
  std::vector<ContainerRecord> out;
  for (const auto& c : resp.containers()) out.push_back(fromPb(c));
  return out;
}

Status ContainerdClient::deleteContainer(const std::string& id) const {
  KNAP_CD_CTX(ctx);
  containers::DeleteContainerRequest req;
  req.set_id(id);
  google::protobuf::Empty resp;
  return fromGrpc(stubs_->containers->Delete(&ctx, req, &resp), "delete container " + id);
}

// ------------------------------------------------------------------ tasks

StatusOr<uint32_t> ContainerdClient::createTask(const TaskCreateRequest& r) const {
  if (r.rootfs.empty())
    return invalidArgument("create task " + r.container_id + ": rootfs mounts are required");
  for (const std::string* p : {&r.stdout_path, &r.stderr_path, &r.stdin_path}) {
    // An absolute path (file or FIFO), or a binary:///abs/logger?... log driver URI (§3.2).
    if (!p->empty() && (*p)[0] != '/' && p->rfind("binary:///", 0) != 0) {
      return invalidArgument("create task " + r.container_id +
                             ": stdio path must be absolute or binary:///: " + *p);
    }
  }
  KNAP_CD_CTX(ctx);
  tasks::CreateTaskRequest req;
  req.set_container_id(r.container_id);
  for (const auto& m : r.rootfs) toPb(m, req.add_rootfs());
  req.set_stdin(r.stdin_path);
  req.set_stdout(r.stdout_path);
  req.set_stderr(r.stderr_path);
  req.set_terminal(false);
  if (r.options) packRuncOptions(*r.options, req.mutable_options());
  tasks::CreateTaskResponse resp;
  grpc::Status s = stubs_->tasks->Create(&ctx, req, &resp);
  if (!s.ok()) return fromGrpc(s, "create task " + r.container_id);
  return resp.pid();
}

StatusOr<uint32_t> ContainerdClient::startTask(const std::string& id) const {
  KNAP_CD_CTX(ctx);
  tasks::StartRequest req;
  req.set_container_id(id);
  tasks::StartResponse resp;
  grpc::Status s = stubs_->tasks->Start(&ctx, req, &resp);
  if (!s.ok()) return fromGrpc(s, "start task " + id);
  return resp.pid();
}

StatusOr<ExitInfo> ContainerdClient::waitTask(const std::string& id, CallCanceller* canceller) const {
  grpc::ClientContext ctx;
  setup(&ctx, options_.ns, lease_, time_, std::nullopt);  // no deadline: waits for the exit
  if (canceller != nullptr && !canceller->attach(&ctx))
    return unavailable("containerd wait task " + id + ": cancelled");
  tasks::WaitRequest req;
  req.set_container_id(id);
  tasks::WaitResponse resp;
  grpc::Status s = stubs_->tasks->Wait(&ctx, req, &resp);
  if (canceller != nullptr) canceller->attach(nullptr);
  if (!s.ok()) return fromGrpc(s, "wait task " + id);
  ExitInfo e;
  e.exit_status = resp.exit_status();
  if (resp.has_exited_at()) e.exited_at = fromTimestamp(resp.exited_at());
  return e;
}

Status ContainerdClient::killTask(const std::string& id, int signal, bool all) const {
  KNAP_CD_CTX(ctx);
  tasks::KillRequest req;
  req.set_container_id(id);
  req.set_signal(static_cast<uint32_t>(signal));
  req.set_all(all);
  google::protobuf::Empty resp;
  return fromGrpc(stubs_->tasks->Kill(&ctx, req, &resp),
                  "kill task " + id + " with signal " + std::to_string(signal));
}

StatusOr<ExitInfo> ContainerdClient::deleteTask(const std::string& id) const {
  KNAP_CD_CTX(ctx);
  tasks::DeleteTaskRequest req;
  req.set_container_id(id);
  tasks::DeleteResponse resp;
  grpc::Status s = stubs_->tasks->Delete(&ctx, req, &resp);
  if (!s.ok()) return fromGrpc(s, "delete task " + id);
  ExitInfo e;
  e.pid = resp.pid();
  e.exit_status = resp.exit_status();
  if (resp.has_exited_at()) e.exited_at = fromTimestamp(resp.exited_at());
  return e;
}

StatusOr<TaskInfo> ContainerdClient::getTask(const std::string& id) const {
  KNAP_CD_CTX(ctx);
  tasks::GetRequest req;
  req.set_container_id(id);
  tasks::GetResponse resp;
  grpc::Status s = stubs_->tasks->Get(&ctx, req, &resp);
  if (!s.ok()) return fromGrpc(s, "get task " + id);
  return fromPb(resp.process());
}

StatusOr<std::vector<TaskInfo>> ContainerdClient::listTasks() const {
  KNAP_CD_CTX(ctx);
  tasks::ListTasksRequest req;
  tasks::ListTasksResponse resp;
  grpc::Status s = stubs_->tasks->List(&ctx, req, &resp);
  if (!s.ok()) return fromGrpc(s, "list tasks");
  std::vector<TaskInfo> out;
  for (const auto& p : resp.tasks()) out.push_back(fromPb(p));
  return out;
}

Status ContainerdClient::pauseTask(const std::string& id) const {
  KNAP_CD_CTX(ctx);
  tasks::PauseTaskRequest req;
  req.set_container_id(id);
  google::protobuf::Empty resp;
  return fromGrpc(stubs_->tasks->Pause(&ctx, req, &resp), "pause task " + id);
}

// ------------------------------------------------------------------ exec processes

Status ContainerdClient::execProcess(const ExecProcessRequest& r) const {
  for (const std::string* p : {&r.stdout_path, &r.stderr_path}) {
    if (!p->empty() && (*p)[0] != '/') {
      return invalidArgument("exec in " + r.container_id + ": stdio path must be absolute: " + *p);
    }
  }
  if (r.exec_id.empty()) return invalidArgument("exec in " + r.container_id + ": exec id is required");
  KNAP_CD_CTX(ctx);
  tasks::ExecProcessRequest req;
  req.set_container_id(r.container_id);
  req.set_exec_id(r.exec_id);
  req.set_stdout(r.stdout_path);
  req.set_stderr(r.stderr_path);
  req.set_terminal(false);
  req.mutable_spec()->set_type_url(kProcessTypeUrl);  // a JSON value, like the container spec (G3)
  req.mutable_spec()->set_value(r.process_json);
  google::protobuf::Empty resp;
  return fromGrpc(stubs_->tasks->Exec(&ctx, req, &resp), "exec " + r.exec_id + " in " + r.container_id);
}

StatusOr<uint32_t> ContainerdClient::startProcess(const std::string& id, const std::string& exec_id) const {
  KNAP_CD_CTX(ctx);
  tasks::StartRequest req;
  req.set_container_id(id);
  req.set_exec_id(exec_id);
  tasks::StartResponse resp;
  grpc::Status s = stubs_->tasks->Start(&ctx, req, &resp);
  if (!s.ok()) return fromGrpc(s, "start exec " + exec_id + " in " + id);
  return resp.pid();
}

StatusOr<ExitInfo> ContainerdClient::waitProcess(const std::string& id, const std::string& exec_id,
                                                 Duration timeout) const {
  grpc::ClientContext ctx;
  setup(&ctx, options_.ns, lease_, time_, timeout);
  tasks::WaitRequest req;
  req.set_container_id(id);
  req.set_exec_id(exec_id);
  tasks::WaitResponse resp;
  grpc::Status s = stubs_->tasks->Wait(&ctx, req, &resp);
  if (!s.ok()) return fromGrpc(s, "wait exec " + exec_id + " in " + id);
  ExitInfo e;
  e.exit_status = resp.exit_status();
  if (resp.has_exited_at()) e.exited_at = fromTimestamp(resp.exited_at());
  return e;
}

Status ContainerdClient::killProcess(const std::string& id, const std::string& exec_id, int signal) const {
  KNAP_CD_CTX(ctx);
  tasks::KillRequest req;
  req.set_container_id(id);
  req.set_exec_id(exec_id);
  req.set_signal(static_cast<uint32_t>(signal));
  google::protobuf::Empty resp;
  return fromGrpc(stubs_->tasks->Kill(&ctx, req, &resp),
                  "kill exec " + exec_id + " in " + id + " with signal " + std::to_string(signal));
}

StatusOr<ExitInfo> ContainerdClient::deleteProcess(const std::string& id, const std::string& exec_id) const {
  KNAP_CD_CTX(ctx);
  tasks::DeleteProcessRequest req;
  req.set_container_id(id);
  req.set_exec_id(exec_id);
  tasks::DeleteResponse resp;
  grpc::Status s = stubs_->tasks->DeleteProcess(&ctx, req, &resp);
  if (!s.ok()) return fromGrpc(s, "delete exec " + exec_id + " in " + id);
  ExitInfo e;
  e.pid = resp.pid();
  e.exit_status = resp.exit_status();
  if (resp.has_exited_at()) e.exited_at = fromTimestamp(resp.exited_at());
  return e;
}

Status ContainerdClient::resumeTask(const std::string& id) const {
  KNAP_CD_CTX(ctx);
  tasks::ResumeTaskRequest req;
  req.set_container_id(id);
  google::protobuf::Empty resp;
  return fromGrpc(stubs_->tasks->Resume(&ctx, req, &resp), "resume task " + id);
}

// ------------------------------------------------------------------ events

namespace {

// Decodes the task payloads we care about; type URLs carry no
// type.googleapis.com/ prefix, so Any::UnpackTo cannot be used (G10).
void decodeTaskEvent(Event* e) {
  namespace ev = ::containerd::events;
  const std::string& t = e->type_url;
  if (t == "containerd.events.TaskExit") {
    ev::TaskExit m;
    if (m.ParseFromString(e->payload)) {
      e->container_id = m.container_id();
      e->exec_id = m.id();
      e->pid = m.pid();
      e->exit_status = m.exit_status();
      if (m.has_exited_at()) e->exited_at = fromTimestamp(m.exited_at());
    }
  } else if (t == "containerd.events.TaskStart") {
    ev::TaskStart m;
    if (m.ParseFromString(e->payload)) e->container_id = m.container_id(), e->pid = m.pid();
  } else if (t == "containerd.events.TaskCreate") {
    ev::TaskCreate m;
    if (m.ParseFromString(e->payload)) e->container_id = m.container_id(), e->pid = m.pid();
  } else if (t == "containerd.events.TaskDelete") {
    ev::TaskDelete m;
    if (m.ParseFromString(e->payload)) {
      e->container_id = m.container_id();
      e->exec_id = m.id();
      e->pid = m.pid();
      e->exit_status = m.exit_status();
      if (m.has_exited_at()) e->exited_at = fromTimestamp(m.exited_at());
    }
  } else if (t == "containerd.events.TaskOOM") {
    ev::TaskOOM m;
    if (m.ParseFromString(e->payload)) e->container_id = m.container_id();
  } else if (t == "containerd.events.TaskPaused") {
    ev::TaskPaused m;
    if (m.ParseFromString(e->payload)) e->container_id = m.container_id();
  } else if (t == "containerd.events.TaskResumed") {
    ev::TaskResumed m;
    if (m.ParseFromString(e->payload)) e->container_id = m.container_id();
  }
}

class GrpcEventStream final : public EventStream {
 public:
  GrpcEventStream(std::unique_ptr<grpc::ClientContext> ctx, std::string sync_topic)
      : ctx_(std::move(ctx)), sync_topic_(std::move(sync_topic)) {}
  ~GrpcEventStream() override {
    if (reader_ && !finished_) {
      ctx_->TryCancel();
      events::Envelope env;
      while (reader_->Read(&env)) {
      }
      reader_->Finish();
    }
  }
  void start(events::Events::Stub* stub, const events::SubscribeRequest& req) {
    reader_ = stub->Subscribe(ctx_.get(), req);
  }

  // Reads until the sync event arrives; false if the stream ends first.
  bool awaitSync() {
    events::Envelope env;
    while (reader_->Read(&env)) {
      if (env.topic() == sync_topic_) return true;
      pending_.push_back(env);  // cannot happen before sync in practice; keep it anyway
    }
    return false;
  }

  bool next(Event* out) override {
    events::Envelope env;
    if (!pending_.empty()) {
      env = std::move(pending_.front());
      pending_.erase(pending_.begin());
    } else {
      do {
        if (!reader_->Read(&env)) return false;
      } while (env.topic() == sync_topic_);
    }
    *out = Event{};
    if (env.has_timestamp()) out->timestamp = fromTimestamp(env.timestamp());
    out->ns = env.namespace_();
    out->topic = env.topic();
    out->type_url = env.event().type_url();
    out->payload = env.event().value();
    decodeTaskEvent(out);
    return true;
  }

  void cancel() override {
    cancelled_ = true;
    ctx_->TryCancel();
  }

  Status finish() override {
    if (finished_) return status_;
    finished_ = true;
    grpc::Status s = reader_->Finish();
    if (cancelled_ || s.error_code() == grpc::StatusCode::CANCELLED) {
      status_ = Status::ok();
    } else {
      status_ = fromGrpc(s, "events subscription");
      if (status_.isOk()) status_ = unavailable("containerd events subscription: stream ended");
    }
    return status_;
  }

 private:
  std::unique_ptr<grpc::ClientContext> ctx_;
  std::unique_ptr<grpc::ClientReader<events::Envelope>> reader_;
  std::string sync_topic_;
  std::vector<events::Envelope> pending_;
  std::atomic<bool> cancelled_{false};
  bool finished_ = false;
  Status status_;
};

}  // namespace

StatusOr<std::unique_ptr<EventStream>> ContainerdClient::subscribe(
    const std::vector<std::string>& filters) const {
  const std::string token = randomHex(16);
  const std::string sync_topic = "/knap/subscribe-sync/" + token;
  const std::string ns_filter = "namespace==" + quoteFilterValue(options_.ns);
  events::SubscribeRequest req;
  if (filters.empty()) {
    req.add_filters(ns_filter);
  } else {
    for (const auto& f : filters) req.add_filters(f + "," + ns_filter);  // G14
  }
  req.add_filters("topic==" + quoteFilterValue(sync_topic) + "," + ns_filter);

  auto ctx = std::make_unique<grpc::ClientContext>();
  setup(ctx.get(), options_.ns, "", time_, std::nullopt);
  auto stream = std::make_unique<GrpcEventStream>(std::move(ctx), sync_topic);
  stream->start(stubs_->events.get(), req);

  // Publish sync events until one comes back through the stream: then the
  // server-side subscription is registered. Publishing runs on a helper
  // thread because awaitSync() blocks on the stream.
  std::atomic<bool> synced{false};
  Status publish_status = Status::ok();
  std::thread publisher([&] {
    // No sleeping between attempts (time only goes through common/): each
    // Publish is a round trip, and the subscription is usually live after
    // the first one or two; surplus sync events are skipped by next().
    for (int attempt = 0; attempt < 2000 && !synced; ++attempt) {
      grpc::ClientContext pctx;
      setup(&pctx, options_.ns, "", time_, std::chrono::seconds(2));
      events::PublishRequest preq;
      preq.set_topic(sync_topic);
      preq.mutable_event()->set_type_url("knap.SubscribeSync");
      preq.mutable_event()->set_value(token);
      google::protobuf::Empty presp;
      grpc::Status s = stubs_->events->Publish(&pctx, preq, &presp);
      if (!s.ok()) {
        publish_status = fromGrpc(s, "publish subscription sync event");
        stream->cancel();
        return;
      }
    }
    if (!synced) stream->cancel();
  });
  bool ok = stream->awaitSync();
  synced = true;
  publisher.join();
  if (!ok) {
    Status s = stream->finish();
    if (!publish_status.isOk()) return publish_status;
    return s.isOk() ? unavailable("containerd events subscription did not become ready") : s;
  }
  return std::unique_ptr<EventStream>(std::move(stream));
}

}  // namespace knap::containerd
