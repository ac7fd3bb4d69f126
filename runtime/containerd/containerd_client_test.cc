// Tests of the containerd client. The filter helpers are plain unit tests; the
// rest run against a real containerd (started here when root and the socket is
// missing) in namespace `knap-test`, and skip loudly when none is available.
// KNAP_MKIMAGE and KNAP_TESTAPP (set by meson) point at the binaries packed
// into the test image.
#include "runtime/containerd/containerd_client.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <future>
#include <sstream>
#include <thread>

#include <nlohmann/json.hpp>

#include "oci/digest.h"
#include "runtime/containerd/image_import.h"

namespace knap::containerd {
namespace {

using nlohmann::json;
namespace fs = std::filesystem;

constexpr char kNs[] = "knap-test";
constexpr char kImage[] = "knap.local/testapp:containerd-test";

// ------------------------------------------------------------------ unit

TEST(FilterTest, QuotesKeysAndValues) {
  EXPECT_EQ(labelFilter("knap.dev/revision", "hello-00001"), R"(labels."knap.dev/revision"=="hello-00001")");
  EXPECT_EQ(quoteFilterValue("/tasks/exit"), R"("/tasks/exit")");
  EXPECT_EQ(quoteFilterValue(R"(a"b\c)"), R"("a\"b\\c")");
}

TEST(LogFileTest, CreatesParentsAndKeepsOrTruncates) {
  std::string dir = fs::temp_directory_path() / ("knap-log-test-" + std::to_string(getpid()));
  std::string path = dir + "/a/b/out.log";
  ASSERT_TRUE(prepareLogFile(path).isOk());
  std::ofstream(path, std::ios::app) << "line\n";
  ASSERT_TRUE(prepareLogFile(path).isOk());
  EXPECT_EQ(fs::file_size(path), 5u);
  ASSERT_TRUE(prepareLogFile(path, /*truncate=*/true).isOk());
  EXPECT_EQ(fs::file_size(path), 0u);
  EXPECT_EQ(prepareLogFile("relative.log").code(), Code::kInvalidArgument);
  fs::remove_all(dir);
}

TEST(ClientTest, UnreachableSocketIsUnavailable) {
  ContainerdClient::Options o;
  o.address = "unix:///nonexistent/knap-test.sock";
  ContainerdClient c(o, RealTimeSource::instance());
  StatusOr<VersionInfo> v = c.version(std::chrono::milliseconds(300));
  EXPECT_EQ(v.status().code(), Code::kUnavailable) << v.status().toString();
}

// ------------------------------------------------------------------ integration

// Poll helper for the real daemon; test-only.
template <typename F>
bool eventually(F f, int tries = 100, int step_ms = 50) {
  for (int i = 0; i < tries; ++i) {
    if (f()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(step_ms));
  }
  return false;
}

std::string readFile(const std::string& path) {
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// GET http://127.0.0.1:port/path; "" on connection failure.
std::string httpGet(int port, const std::string& path) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    close(fd);
    return "";
  }
  std::string req = "GET " + path + " HTTP/1.1\r\nHost: test\r\nConnection: close\r\n\r\n";
  if (write(fd, req.data(), req.size()) != static_cast<ssize_t>(req.size())) {
    close(fd);
    return "";
  }
  std::string out;
  char buf[4096];
  ssize_t n;
  while ((n = read(fd, buf, sizeof buf)) > 0) out.append(buf, static_cast<size_t>(n));
  close(fd);
  return out;
}

// A minimal OCI runtime spec in the shape of containerd's defaults (§5), with
// host networking (no network namespace entry).
std::string minimalSpec(const std::string& cid, const std::vector<std::string>& args,
                        const std::vector<std::string>& env) {
  json caps = {"CAP_CHOWN",   "CAP_DAC_OVERRIDE", "CAP_FSETID",           "CAP_FOWNER",
               "CAP_MKNOD",   "CAP_NET_RAW",      "CAP_SETGID",           "CAP_SETUID",
               "CAP_SETFCAP", "CAP_SETPCAP",      "CAP_NET_BIND_SERVICE", "CAP_SYS_CHROOT",
               "CAP_KILL",    "CAP_AUDIT_WRITE"};
  json spec = {
      {"ociVersion", "1.0.2-dev"},
      {"root", {{"path", "rootfs"}}},
      {"process",
       {{"args", args},
        {"env", env},
        {"cwd", "/app"},
        {"user", {{"uid", 1000}, {"gid", 1000}}},
        {"noNewPrivileges", true},
        {"capabilities", {{"bounding", caps}, {"permitted", caps}, {"effective", caps}}},
        {"rlimits", json::array({{{"type", "RLIMIT_NOFILE"}, {"hard", 1024}, {"soft", 1024}}})}}},
      {"mounts",
       json::array({
           {{"destination", "/proc"},
            {"type", "proc"},
            {"source", "proc"},
            {"options", {"nosuid", "noexec", "nodev"}}},
           {{"destination", "/dev"},
            {"type", "tmpfs"},
            {"source", "tmpfs"},
            {"options", {"nosuid", "strictatime", "mode=755", "size=65536k"}}},
           {{"destination", "/dev/pts"},
            {"type", "devpts"},
            {"source", "devpts"},
            {"options", {"nosuid", "noexec", "newinstance", "ptmxmode=0666", "mode=0620", "gid=5"}}},
           {{"destination", "/dev/shm"},
            {"type", "tmpfs"},
            {"source", "shm"},
            {"options", {"nosuid", "noexec", "nodev", "mode=1777", "size=65536k"}}},
           {{"destination", "/dev/mqueue"},
            {"type", "mqueue"},
            {"source", "mqueue"},
            {"options", {"nosuid", "noexec", "nodev"}}},
           {{"destination", "/sys"},
            {"type", "sysfs"},
            {"source", "sysfs"},
            {"options", {"nosuid", "noexec", "nodev", "ro"}}},
       })},
      {"linux",
       {{"cgroupsPath", std::string("/") + kNs + "/" + cid},
        {"resources", {{"devices", json::array({{{"allow", false}, {"access", "rwm"}}})}}},
        {"namespaces",
         json::array({{{"type", "pid"}}, {{"type", "ipc"}}, {{"type", "uts"}}, {{"type", "mount"}}})},
        {"maskedPaths", {"/proc/acpi", "/proc/kcore", "/proc/keys", "/proc/timer_list", "/sys/firmware"}},
        {"readonlyPaths", {"/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys", "/proc/sysrq-trigger"}}}},
  };
  return spec.dump();
}

class ContainerdIntegrationTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    ContainerdClient::Options o;
    o.ns = kNs;
    client_ = new ContainerdClient(o, RealTimeSource::instance());
    if (!client_->version(std::chrono::seconds(1)).isOk() && geteuid() == 0 &&
        !fs::exists("/run/containerd/containerd.sock") &&
        std::system("command -v containerd >/dev/null") == 0) {
      fprintf(stderr, "containerd_client_test: starting containerd (log /var/log/knap/containerd.log)\n");
      std::system(
          "mkdir -p /var/log/knap && setsid containerd >>/var/log/knap/containerd.log 2>&1 < /dev/null &");
    }
    StatusOr<VersionInfo> v = client_->version(std::chrono::seconds(15));
    if (v.isOk()) {
      available_ = true;
      fprintf(stderr, "containerd_client_test: containerd %s\n", v->version.c_str());
    } else {
      skip_reason_ = v.status().toString();
    }
  }
  static void TearDownTestSuite() {
    delete client_;
    client_ = nullptr;
  }

  void SetUp() override {
    if (!available_) {
      GTEST_SKIP()
          << "\n\n*** containerd is NOT available (" << skip_reason_
          << "): SKIPPING the containerd integration tests. Run as root with containerd installed. ***\n";
    }
    if (geteuid() != 0) GTEST_SKIP() << "\n\n*** not root: SKIPPING the containerd integration tests ***\n";
    work_ = fs::temp_directory_path() / ("knap-cd-test-" + std::to_string(getpid()));
    fs::create_directories(work_);
  }
  void TearDown() override {
    if (!work_.empty()) fs::remove_all(work_);
  }

  // Removes whatever an earlier, interrupted run left behind.
  static void cleanupContainer(const std::string& id) {
    (void)client_->killTask(id, SIGKILL, true);
    eventually(
        [&] {
          StatusOr<TaskInfo> t = client_->getTask(id);
          return !t.isOk() || t->status != TaskStatus::kRunning;
        },
        40);
    (void)client_->deleteTask(id);
    (void)client_->removeSnapshot(id);
    (void)client_->deleteContainer(id);
  }

  std::string buildImage() {
    const char* mk = getenv("KNAP_MKIMAGE");
    const char* app = getenv("KNAP_TESTAPP");
    if (mk == nullptr || app == nullptr || !fs::exists(mk) || !fs::exists(app)) {
      ADD_FAILURE() << "KNAP_MKIMAGE / KNAP_TESTAPP must name the built knap-mkimage and knap-testapp "
                       "(meson test sets them; build both targets first)";
      return "";
    }
    std::string out = work_ + "/testapp.tar";
    std::string cmd = std::string(mk) + " --out " + out + " --name " + kImage + " --file " + app +
                      ":/app/knap-testapp --entrypoint /app/knap-testapp --user app --workdir /app --expose "
                      "8080 >/dev/null";
    EXPECT_EQ(std::system(cmd.c_str()), 0) << cmd;
    return out;
  }

  static ContainerdClient* client_;
  static bool available_;
  static std::string skip_reason_;
  std::string work_;
};

ContainerdClient* ContainerdIntegrationTest::client_ = nullptr;
bool ContainerdIntegrationTest::available_ = false;
std::string ContainerdIntegrationTest::skip_reason_;

TEST_F(ContainerdIntegrationTest, ContentWriteIsIdempotentAndLabelled) {
  StatusOr<std::string> lease = client_->createLease("", std::chrono::minutes(10));
  ASSERT_TRUE(lease.isOk()) << lease.status().toString();
  ContainerdClient leased = client_->withLease(*lease);
  std::string blob =
      "knap content test " + std::to_string(getpid()) + std::string(3 << 20, 'z');  // > 1 chunk
  oci::Descriptor d{
      "application/octet-stream", oci::sha256Digest(blob), static_cast<int64_t>(blob.size()), {}};
  ASSERT_TRUE(leased.writeContent(d, blob, {{"knap.dev/test", "one"}}).isOk());
  // Second write: ALREADY_EXISTS on STAT is success, and labels still get applied.
  Status again = leased.writeContent(d, blob, {{"knap.dev/test", "two"}});
  ASSERT_TRUE(again.isOk()) << again.toString();
  StatusOr<ContentInfo> info = client_->contentInfo(d.digest);
  ASSERT_TRUE(info.isOk()) << info.status().toString();
  EXPECT_EQ(info->size, d.size);
  EXPECT_EQ(info->labels["knap.dev/test"], "two");
  StatusOr<std::string> back = client_->readContent(d.digest);
  ASSERT_TRUE(back.isOk()) << back.status().toString();
  EXPECT_TRUE(*back == blob);
  EXPECT_EQ(client_->readContent(d.digest, 10).status().code(), Code::kResourceExhausted);

  // Wrong digest: FAILED_PRECONDITION, and the ingest is aborted (G12).
  oci::Descriptor wrong{"application/octet-stream", oci::sha256Digest("something else"), 5, {}};
  Status bad = leased.writeContent(wrong, std::string_view("hello"));
  EXPECT_EQ(bad.code(), Code::kFailedPrecondition) << bad.toString();

  // The same blob in another namespace: STAT reports offset == total
  // (content is shared), no data is sent, COMMIT makes it visible there.
  ContainerdClient other = client_->withNamespace(std::string(kNs) + "-b");
  StatusOr<std::string> other_lease = other.createLease("", std::chrono::minutes(10));
  ASSERT_TRUE(other_lease.isOk());
  int calls = 0;
  Status shared =
      other.withLease(*other_lease).writeContent(d, [&](uint64_t off, size_t n) -> StatusOr<std::string> {
        ++calls;
        return blob.substr(off, n);
      });
  ASSERT_TRUE(shared.isOk()) << shared.toString();
  EXPECT_EQ(calls, 0);
  EXPECT_TRUE(other.contentInfo(d.digest).isOk());
  ASSERT_TRUE(other.deleteLease(*other_lease, /*sync=*/true).isOk());

  ASSERT_TRUE(client_->deleteLease(*lease, /*sync=*/true).isOk());
  // Unreferenced and unleased: garbage collected.
  EXPECT_EQ(client_->contentInfo(d.digest).status().code(), Code::kNotFound);
  EXPECT_EQ(client_->withLease("no-such-lease").writeContent(d, blob).code(), Code::kNotFound);
}

TEST_F(ContainerdIntegrationTest, ImportRunKillDelete) {
  const std::string cid = "knap-cd-smoke";
  const std::string cid_exit = "knap-cd-exit";
  cleanupContainer(cid);
  cleanupContainer(cid_exit);
  (void)client_->deleteImage(kImage, true);

  // --- import ---
  std::string tar = buildImage();
  ASSERT_FALSE(tar.empty());
  StatusOr<ImageInfo> imported = importImageArchive(*client_, tar);
  ASSERT_TRUE(imported.isOk()) << imported.status().toString();
  EXPECT_EQ(imported->name, kImage);
  ASSERT_EQ(imported->config.diff_ids.size(), 1u);
  EXPECT_EQ(imported->chain_id, oci::chainIds(imported->config.diff_ids).back());
  EXPECT_EQ(imported->config.entrypoint, std::vector<std::string>{"/app/knap-testapp"});
  EXPECT_EQ(imported->config.user, "app");

  StatusOr<SnapshotInfo> top = client_->statSnapshot(imported->chain_id);
  ASSERT_TRUE(top.isOk()) << top.status().toString();
  EXPECT_EQ(top->kind, SnapshotKind::kCommitted);
  StatusOr<ContentInfo> cfg = client_->contentInfo(imported->config_digest);
  ASSERT_TRUE(cfg.isOk());
  EXPECT_EQ(cfg->labels["containerd.io/gc.ref.snapshot.overlayfs"], imported->chain_id);
  StatusOr<ContentInfo> man = client_->contentInfo(imported->manifest_digest);
  ASSERT_TRUE(man.isOk());
  EXPECT_EQ(man->labels["containerd.io/gc.ref.content.config"], imported->config_digest);
  EXPECT_FALSE(man->labels["containerd.io/gc.ref.content.l.0"].empty());
  StatusOr<ContentInfo> layer = client_->contentInfo(man->labels["containerd.io/gc.ref.content.l.0"]);
  ASSERT_TRUE(layer.isOk());
  EXPECT_EQ(layer->labels["containerd.io/uncompressed"], imported->config.diff_ids[0]);

  // The import lease is gone; a GC run must leave the image intact (the GC
  // labels hold blobs and snapshots).
  StatusOr<std::string> gc_lease = client_->createLease("", std::chrono::minutes(1));
  ASSERT_TRUE(gc_lease.isOk());
  ASSERT_TRUE(client_->deleteLease(*gc_lease, /*sync=*/true).isOk());
  ASSERT_TRUE(client_->statSnapshot(imported->chain_id).isOk());

  // --- idempotent re-import and read-back ---
  StatusOr<ImageInfo> again = importImageArchive(*client_, tar);
  ASSERT_TRUE(again.isOk()) << again.status().toString();
  EXPECT_EQ(again->manifest_digest, imported->manifest_digest);
  EXPECT_EQ(again->chain_id, imported->chain_id);
  StatusOr<ImageInfo> got = getImage(*client_, kImage);
  ASSERT_TRUE(got.isOk()) << got.status().toString();
  EXPECT_TRUE(got->unpacked);
  EXPECT_EQ(got->config_digest, imported->config_digest);
  EXPECT_EQ(got->chain_id, imported->chain_id);
  EXPECT_EQ(got->config.working_dir, "/app");
  EXPECT_EQ(getImage(*client_, "knap.local/none:v0").status().code(), Code::kNotFound);
  StatusOr<std::vector<ImageRecord>> images =
      client_->listImages({std::string("name==") + quoteFilterValue(kImage)});
  ASSERT_TRUE(images.isOk()) << images.status().toString();
  ASSERT_EQ(images->size(), 1u);
  EXPECT_EQ((*images)[0].target.digest, imported->manifest_digest);
  EXPECT_EQ((*images)[0].target.media_type, oci::kMediaTypeOciManifest);

  // --- container + task (host network) ---
  const int port = 18000 + getpid() % 1000;
  StatusOr<std::string> lease = client_->createLease("", std::chrono::minutes(10));
  ASSERT_TRUE(lease.isOk());
  ContainerdClient leased = client_->withLease(*lease);
  StatusOr<std::vector<Mount>> mounts = leased.prepareSnapshot(cid, imported->chain_id);
  ASSERT_TRUE(mounts.isOk()) << mounts.status().toString();
  EXPECT_EQ(leased.prepareSnapshot(cid, imported->chain_id).status().code(), Code::kAlreadyExists);  // G5
  ContainerRecord rec;
  rec.id = cid;
  rec.labels = {{"knap.dev/revision", "smoke-00001"}};
  rec.image = kImage;
  rec.spec_json = minimalSpec(cid, {"/app/knap-testapp", "--port-from-arg", std::to_string(port)},
                              {"PATH=/usr/bin:/bin", "K_REVISION=smoke-00001"});
  rec.snapshot_key = cid;
  ASSERT_TRUE(leased.createContainer(rec).isOk());
  EXPECT_EQ(leased.createContainer(rec).code(), Code::kAlreadyExists);
  ASSERT_TRUE(client_->deleteLease(*lease).isOk());

  StatusOr<ContainerRecord> crec = client_->getContainer(cid);
  ASSERT_TRUE(crec.isOk());
  EXPECT_EQ(crec->runtime, kRuncRuntime);
  EXPECT_EQ(crec->snapshot_key, cid);
  EXPECT_EQ(json::parse(crec->spec_json)["process"]["args"][0], "/app/knap-testapp");
  StatusOr<std::vector<ContainerRecord>> listed =
      client_->listContainers({labelFilter("knap.dev/revision", "smoke-00001")});
  ASSERT_TRUE(listed.isOk()) << listed.status().toString();
  ASSERT_EQ(listed->size(), 1u);
  EXPECT_EQ((*listed)[0].id, cid);
  EXPECT_EQ(client_->getContainer("knap-cd-missing").status().code(), Code::kNotFound);

  std::string out = work_ + "/smoke.out", err = work_ + "/smoke.err";
  ASSERT_TRUE(prepareLogFile(out).isOk());
  ASSERT_TRUE(prepareLogFile(err).isOk());
  TaskCreateRequest treq;
  treq.container_id = cid;
  treq.rootfs = *client_->snapshotMounts(cid);
  treq.stdout_path = out;
  treq.stderr_path = err;
  StatusOr<uint32_t> pid = client_->createTask(treq);
  ASSERT_TRUE(pid.isOk()) << pid.status().toString();
  EXPECT_GT(*pid, 0u);
  EXPECT_EQ(client_->getTask(cid)->status, TaskStatus::kCreated);

  // Wait before Start (§3.3), and subscribe to exit events before anything can exit.
  auto waiter = std::async(std::launch::async, [&] { return client_->waitTask(cid); });
  StatusOr<std::unique_ptr<EventStream>> events = client_->subscribe({R"(topic=="/tasks/exit")"});
  ASSERT_TRUE(events.isOk()) << events.status().toString();
  StatusOr<uint32_t> started = client_->startTask(cid);
  ASSERT_TRUE(started.isOk()) << started.status().toString();

  std::string body;
  ASSERT_TRUE(eventually([&] { return !(body = httpGet(port, "/")).empty(); })) << "test app never answered";
  EXPECT_NE(body.find("revision=smoke-00001"), std::string::npos) << body;
  StatusOr<TaskInfo> running = client_->getTask(cid);
  ASSERT_TRUE(running.isOk());
  EXPECT_EQ(running->status, TaskStatus::kRunning);
  EXPECT_EQ(running->stdout_path, out);
  StatusOr<std::vector<TaskInfo>> tasks = client_->listTasks();
  ASSERT_TRUE(tasks.isOk());
  EXPECT_TRUE(
      std::any_of(tasks->begin(), tasks->end(), [&](const TaskInfo& t) { return t.container_id == cid; }));

  ASSERT_TRUE(client_->pauseTask(cid).isOk());
  EXPECT_EQ(client_->getTask(cid)->status, TaskStatus::kPaused);
  ASSERT_TRUE(client_->resumeTask(cid).isOk());
  EXPECT_EQ(client_->getTask(cid)->status, TaskStatus::kRunning);
  EXPECT_EQ(client_->deleteTask(cid).status().code(), Code::kInternal);  // running: UNKNOWN (G7)

  // A second, cancellable Wait on the running task: cancel() makes it return.
  CallCanceller canceller;
  auto cancelled_wait = std::async(std::launch::async, [&] { return client_->waitTask(cid, &canceller); });
  EXPECT_EQ(cancelled_wait.wait_for(std::chrono::milliseconds(200)),
            std::future_status::timeout);  // still blocked
  canceller.cancel();
  ASSERT_EQ(cancelled_wait.wait_for(std::chrono::seconds(5)), std::future_status::ready);
  EXPECT_EQ(cancelled_wait.get().status().code(), Code::kUnavailable);
  EXPECT_EQ(client_->getTask(cid)->status, TaskStatus::kRunning);

  // SIGTERM: the app drains and exits 0.
  ASSERT_TRUE(client_->killTask(cid, SIGTERM).isOk());
  ASSERT_EQ(waiter.wait_for(std::chrono::seconds(10)), std::future_status::ready);
  StatusOr<ExitInfo> exited = waiter.get();
  ASSERT_TRUE(exited.isOk()) << exited.status().toString();
  EXPECT_EQ(exited->exit_status, 0u);
  Event ev;
  ASSERT_TRUE((*events)->next(&ev));
  EXPECT_EQ(ev.topic, "/tasks/exit");
  EXPECT_EQ(ev.ns, kNs);
  EXPECT_EQ(ev.type_url, "containerd.events.TaskExit");
  EXPECT_EQ(ev.container_id, cid);
  EXPECT_EQ(ev.exec_id, cid);
  EXPECT_EQ(ev.exit_status, 0u);
  (*events)->cancel();
  EXPECT_FALSE((*events)->next(&ev));
  EXPECT_TRUE((*events)->finish().isOk());

  EXPECT_EQ(client_->killTask(cid, SIGKILL).code(), Code::kNotFound);  // already finished
  StatusOr<ExitInfo> deleted = client_->deleteTask(cid);
  ASSERT_TRUE(deleted.isOk()) << deleted.status().toString();
  EXPECT_EQ(deleted->exit_status, 0u);
  EXPECT_EQ(client_->getTask(cid).status().code(), Code::kNotFound);
  std::string log = readFile(out);
  EXPECT_NE(log.find("listening on port " + std::to_string(port)), std::string::npos) << log;
  EXPECT_NE(log.find("GET / HTTP/1.1"), std::string::npos) << log;
  EXPECT_NE(log.find("drained, exiting 0"), std::string::npos) << log;

  ASSERT_TRUE(client_->removeSnapshot(cid).isOk());
  ASSERT_TRUE(client_->deleteContainer(cid).isOk());
  EXPECT_EQ(client_->statSnapshot(cid).status().code(), Code::kNotFound);

  // --- a task that exits by itself: Wait sees the status, stdout/stderr split ---
  lease = client_->createLease("", std::chrono::minutes(10));
  ASSERT_TRUE(lease.isOk());
  leased = client_->withLease(*lease);
  ASSERT_TRUE(leased.prepareSnapshot(cid_exit, imported->chain_id).isOk());
  rec.id = cid_exit;
  rec.snapshot_key = cid_exit;
  rec.labels = {{"knap.dev/revision", "exit-00001"}};
  rec.spec_json = minimalSpec(cid_exit, {"/app/knap-testapp", "--fail-start"}, {"PATH=/bin"});
  ASSERT_TRUE(leased.createContainer(rec).isOk());
  ASSERT_TRUE(client_->deleteLease(*lease).isOk());
  std::string out2 = work_ + "/exit.out", err2 = work_ + "/exit.err";
  ASSERT_TRUE(prepareLogFile(out2).isOk());
  ASSERT_TRUE(prepareLogFile(err2).isOk());
  treq.container_id = cid_exit;
  treq.rootfs = *client_->snapshotMounts(cid_exit);
  treq.stdout_path = out2;
  treq.stderr_path = err2;
  ASSERT_TRUE(client_->createTask(treq).isOk());
  auto waiter2 = std::async(std::launch::async, [&] { return client_->waitTask(cid_exit); });
  ASSERT_TRUE(client_->startTask(cid_exit).isOk());
  ASSERT_EQ(waiter2.wait_for(std::chrono::seconds(10)), std::future_status::ready);
  StatusOr<ExitInfo> exit2 = waiter2.get();
  ASSERT_TRUE(exit2.isOk()) << exit2.status().toString();
  EXPECT_EQ(exit2->exit_status, 1u);
  // An exited but undeleted task answers Wait at once with the stored status.
  StatusOr<ExitInfo> rewait = client_->waitTask(cid_exit);
  ASSERT_TRUE(rewait.isOk());
  EXPECT_EQ(rewait->exit_status, 1u);
  EXPECT_EQ(client_->getTask(cid_exit)->status, TaskStatus::kStopped);
  EXPECT_TRUE(client_->deleteTask(cid_exit).isOk());
  EXPECT_NE(readFile(out2).find("failing at start"), std::string::npos);
  EXPECT_NE(readFile(err2).find("--fail-start"), std::string::npos);
  EXPECT_EQ(readFile(out2).find("--fail-start\n"), std::string::npos);  // stderr line went only to stderr
  ASSERT_TRUE(client_->removeSnapshot(cid_exit).isOk());
  ASSERT_TRUE(client_->deleteContainer(cid_exit).isOk());

  // --- image delete: GC takes the snapshots once nothing holds them ---
  ASSERT_TRUE(client_->deleteImage(kImage, /*sync=*/true).isOk());
  EXPECT_EQ(client_->statSnapshot(imported->chain_id).status().code(), Code::kNotFound);
  EXPECT_EQ(client_->getImage(kImage).status().code(), Code::kNotFound);
}

std::string runCommand(const std::string& cmd) {
  std::string out;
  FILE* f = popen(cmd.c_str(), "r");
  if (f == nullptr) return out;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, f)) > 0) out.append(buf, n);
  pclose(f);
  return out;
}

// Cross-check with an archive made by another tool: umoci writes gzip layers
// (diff_id != layer digest), an index entry without platform, "./" paths.
TEST_F(ContainerdIntegrationTest, ImportsGzipMultiLayerImageBuiltByUmoci) {
  if (std::system("command -v umoci >/dev/null") != 0) {
    GTEST_SKIP() << "\n\n*** umoci is not installed (tools/setup.sh --test installs it): SKIPPING the umoci "
                    "cross-check ***\n";
  }
  const char* app = getenv("KNAP_TESTAPP");
  ASSERT_TRUE(app != nullptr && fs::exists(app)) << "KNAP_TESTAPP must name the built knap-testapp";
  const std::string name = "knap.local/umoci:v1";
  (void)client_->deleteImage(name, true);
  std::string cmd = "set -e; cd " + work_ + "; mkdir -p d1/app d2; cp " + fs::absolute(app).string() +
                    " d1/app/; echo hello > d2/greeting.txt;" +
                    " umoci init --layout img; umoci new --image img:v1; umoci insert --image img:v1 d1 /;" +
                    " umoci insert --image img:v1 d2 /data; umoci config --image img:v1 --config.entrypoint "
                    "/app/knap-testapp;" +
                    " cd img && tar -cf ../umoci.tar . ) >/dev/null 2>&1";
  cmd = "(" + cmd;
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;

  ImportOptions opts;
  opts.name = name;  // umoci only writes a tag-only ref.name ("v1")
  StatusOr<ImageInfo> img = importImageArchive(*client_, work_ + "/umoci.tar", opts);
  ASSERT_TRUE(img.isOk()) << img.status().toString();
  ASSERT_EQ(img->chain_ids.size(), 2u);
  EXPECT_EQ(img->config.entrypoint, std::vector<std::string>{"/app/knap-testapp"});
  StatusOr<std::string> manifest_json = client_->readContent(img->manifest_digest);
  ASSERT_TRUE(manifest_json.isOk());
  StatusOr<oci::Manifest> m = oci::parseManifest(*manifest_json);
  ASSERT_TRUE(m.isOk());
  ASSERT_EQ(m->layers.size(), 2u);
  EXPECT_EQ(m->layers[0].media_type, oci::kMediaTypeOciLayerGzip);
  EXPECT_NE(m->layers[0].digest, img->config.diff_ids[0]);  // compressed
  for (size_t i = 0; i < 2; ++i) {
    StatusOr<ContentInfo> li = client_->contentInfo(m->layers[i].digest);
    ASSERT_TRUE(li.isOk());
    EXPECT_EQ(li->labels["containerd.io/uncompressed"], img->config.diff_ids[i]);
  }
  StatusOr<SnapshotInfo> top = client_->statSnapshot(img->chain_ids[1]);
  ASSERT_TRUE(top.isOk()) << top.status().toString();
  EXPECT_EQ(top->parent, img->chain_ids[0]);
  if (std::system("command -v ctr >/dev/null") == 0) {
    std::string check = runCommand(std::string("ctr -n ") + kNs + " images check name==" + name + " 2>&1");
    EXPECT_NE(check.find("complete (3/3)"), std::string::npos) << check;
    EXPECT_NE(check.find("true"), std::string::npos) << check;  // UNPACKED column
  }
  ASSERT_TRUE(client_->deleteImage(name, true).isOk());
  EXPECT_EQ(client_->statSnapshot(img->chain_ids[1]).status().code(), Code::kNotFound);
}

// knap-mkimage --index-of: a two-platform index; the import takes linux/amd64.
TEST_F(ContainerdIntegrationTest, ImportPicksThePlatformFromAnIndex) {
  const char* mk = getenv("KNAP_MKIMAGE");
  ASSERT_TRUE(mk != nullptr && fs::exists(mk)) << "KNAP_MKIMAGE must name the built knap-mkimage";
  const std::string name = "knap.local/multi:v1";
  (void)client_->deleteImage(name, true);
  std::ofstream(work_ + "/hello.txt") << "hello";
  std::string base =
      std::string(mk) + " --name " + name + " --file " + work_ + "/hello.txt:/hello.txt --cmd /hello";
  std::string out = runCommand(base + " --out " + work_ + "/amd64.tar --platform linux/amd64 --gzip");
  ASSERT_NE(out.find("linux/amd64=sha256:"), std::string::npos) << out;
  std::string amd64_digest = out.substr(out.find("linux/amd64=") + 12, 71);
  ASSERT_EQ(
      std::system((base + " --out " + work_ + "/arm64.tar --platform linux/arm64/v8 >/dev/null").c_str()), 0);
  ASSERT_EQ(std::system((std::string(mk) + " --name " + name + " --out " + work_ + "/multi.tar --index-of " +
                         work_ + "/amd64.tar," + work_ + "/arm64.tar >/dev/null")
                            .c_str()),
            0);
  StatusOr<ImageInfo> img = importImageArchive(*client_, work_ + "/multi.tar");
  ASSERT_TRUE(img.isOk()) << img.status().toString();
  EXPECT_EQ(img->name, name);
  EXPECT_EQ(img->manifest_digest, amd64_digest);
  EXPECT_EQ(img->config.cmd, std::vector<std::string>{"/hello"});
  EXPECT_TRUE(img->unpacked);
  StatusOr<oci::Manifest> m = oci::parseManifest(*client_->readContent(img->manifest_digest));
  ASSERT_TRUE(m.isOk());
  EXPECT_EQ(m->layers[0].media_type, oci::kMediaTypeOciLayerGzip);  // --gzip layer unpacked to its diff_id
  EXPECT_EQ(client_->contentInfo(m->layers[0].digest)->labels["containerd.io/uncompressed"],
            img->config.diff_ids[0]);
  ImportOptions s390;
  s390.platform = *oci::parsePlatform("linux/s390x");
  EXPECT_EQ(importImageArchive(*client_, work_ + "/multi.tar", s390).status().code(), Code::kNotFound);
  EXPECT_EQ(importImageArchive(*client_, work_ + "/missing.tar").status().code(), Code::kNotFound);
  ASSERT_TRUE(client_->deleteImage(name, true).isOk());
}

// Several imports of one fresh image at once: blob and snapshot races end in
// ALREADY_EXISTS paths that must all count as success.
TEST_F(ContainerdIntegrationTest, ConcurrentImportsOfOneImageAllSucceed) {
  const char* mk = getenv("KNAP_MKIMAGE");
  ASSERT_TRUE(mk != nullptr && fs::exists(mk)) << "KNAP_MKIMAGE must name the built knap-mkimage";
  const std::string name = "knap.local/concurrent:v1";
  (void)client_->deleteImage(name, true);
  // Unique content so that nothing is unpacked yet.
  std::ofstream(work_ + "/unique.txt")
      << "pid " << getpid() << " t " << std::chrono::steady_clock::now().time_since_epoch().count();
  ASSERT_EQ(std::system((std::string(mk) + " --name " + name + " --out " + work_ + "/c.tar --file " + work_ +
                         "/unique.txt:/unique.txt --cmd /x >/dev/null")
                            .c_str()),
            0);
  std::vector<std::future<StatusOr<ImageInfo>>> imports;
  for (int i = 0; i < 3; ++i) {
    imports.push_back(
        std::async(std::launch::async, [&] { return importImageArchive(*client_, work_ + "/c.tar"); }));
  }
  std::string chain;
  for (auto& f : imports) {
    StatusOr<ImageInfo> r = f.get();
    ASSERT_TRUE(r.isOk()) << r.status().toString();
    if (chain.empty()) chain = r->chain_id;
    EXPECT_EQ(r->chain_id, chain);
  }
  EXPECT_TRUE(client_->statSnapshot(chain).isOk());
  // No extraction snapshot was left behind.
  StatusOr<std::vector<SnapshotInfo>> snaps = client_->listSnapshots();
  ASSERT_TRUE(snaps.isOk()) << snaps.status().toString();
  for (const auto& sn : *snaps) EXPECT_EQ(sn.name.rfind("extract-", 0), std::string::npos) << sn.name;
  ASSERT_TRUE(client_->deleteImage(name, true).isOk());
}

// knap-mkimage's archives are accepted by the stock tools.
TEST_F(ContainerdIntegrationTest, CtrAndSkopeoAcceptMkimageOutput) {
  if (std::system("command -v ctr >/dev/null") != 0)
    GTEST_SKIP() << "\n\n*** ctr not installed: SKIPPING ***\n";
  std::string tar = buildImage();
  ASSERT_FALSE(tar.empty());
  const std::string ns = std::string(kNs) + "-ctr";
  std::string imported = runCommand("ctr -n " + ns + " images import " + tar + " 2>&1");
  EXPECT_NE(imported.find(std::string("unpacking ") + kImage), std::string::npos) << imported;
  std::string check = runCommand("ctr -n " + ns + " images check 2>&1");
  EXPECT_NE(check.find("complete (2/2)"), std::string::npos) << check;
  runCommand("ctr -n " + ns + " images rm --sync " + kImage + " 2>&1");
  if (std::system("command -v skopeo >/dev/null") == 0) {
    std::string inspect = runCommand("skopeo inspect --raw oci-archive:" + tar + " 2>&1");
    EXPECT_NE(inspect.find(oci::kMediaTypeOciManifest), std::string::npos) << inspect;
  }
}

TEST_F(ContainerdIntegrationTest, ErrorsMapToStatusCodes) {
  EXPECT_EQ(client_->waitTask("knap-cd-nonexistent").status().code(), Code::kNotFound);
  EXPECT_EQ(client_->getTask("knap-cd-nonexistent").status().code(), Code::kNotFound);
  EXPECT_EQ(client_->statSnapshot("sha256:" + std::string(64, '0')).status().code(), Code::kNotFound);
  EXPECT_EQ(client_->prepareSnapshot("knap-cd-orphan", "no-such-parent").status().code(), Code::kNotFound);
  Status s = client_->withNamespace("").deleteContainer("x");
  EXPECT_EQ(s.code(), Code::kFailedPrecondition) << s.toString();  // "namespace is required"
  EXPECT_NE(s.message().find("delete container x"), std::string::npos) << s.message();
  ContainerRecord bad;
  bad.id = "bad id!";
  bad.spec_json = "{}";
  EXPECT_EQ(client_->createContainer(bad).code(), Code::kInvalidArgument);
  CallCanceller canceller;
  canceller.cancel();  // cancelled before the call: returns at once
  EXPECT_EQ(client_->waitTask("knap-cd-nonexistent", &canceller).status().code(), Code::kUnavailable);
}

}  // namespace
}  // namespace knap::containerd
