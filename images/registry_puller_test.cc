#include "images/registry_puller.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "images/test_registry.h"
#include "oci/digest.h"

namespace knap::images {
namespace {

using testing::TestImage;
using testing::TestRegistry;

// An in-memory ImageStore that checks what a puller hands it.
class FakeImageStore : public ImageStore {
 public:
  struct State {
    std::mutex mu;
    std::map<std::string, std::string> blobs;
    std::map<std::string, BlobLabels> labels;
    std::map<std::string, oci::Descriptor> images;
    std::vector<std::string> unpacked;  // config digests
    int sessions_open = 0;
    int sessions_total = 0;
  };

  class FakeSession : public Session {
   public:
    explicit FakeSession(State& s) : s_(s) {}
    ~FakeSession() override {
      std::lock_guard<std::mutex> lock(s_.mu);
      --s_.sessions_open;
    }
    StatusOr<bool> hasBlob(const oci::Descriptor& d) override {
      std::lock_guard<std::mutex> lock(s_.mu);
      auto it = s_.blobs.find(d.digest);
      return it != s_.blobs.end() && static_cast<int64_t>(it->second.size()) == d.size;
    }
    Status putBlobFile(const oci::Descriptor& d, const std::string& path) override {
      std::ifstream f(path, std::ios::binary);
      std::stringstream ss;
      ss << f.rdbuf();
      return putBlob(d, ss.str(), {});
    }
    Status putBlob(const oci::Descriptor& d, const std::string& data, const BlobLabels& labels) override {
      // What containerd does at commit.
      if (oci::sha256Digest(data) != d.digest || static_cast<int64_t>(data.size()) != d.size) {
        return failedPrecondition("fake store: content does not match " + d.digest);
      }
      std::lock_guard<std::mutex> lock(s_.mu);
      s_.blobs[d.digest] = data;
      for (const auto& [k, v] : labels) s_.labels[d.digest][k] = v;
      return Status::ok();
    }
    StatusOr<std::string> readBlob(const std::string& digest) override {
      std::lock_guard<std::mutex> lock(s_.mu);
      auto it = s_.blobs.find(digest);
      if (it == s_.blobs.end()) return notFound("fake store: no blob " + digest);
      return it->second;
    }
    Status unpack(const std::vector<oci::Descriptor>& layers, const std::vector<std::string>& diff_ids,
                  const std::string& config_digest) override {
      std::lock_guard<std::mutex> lock(s_.mu);
      for (size_t i = 0; i < layers.size(); ++i) {
        auto it = s_.blobs.find(layers[i].digest);
        if (it == s_.blobs.end()) return failedPrecondition("fake store: unpack of absent layer");
        if (oci::sha256Digest(it->second) != diff_ids[i]) return failedPrecondition("diff_id mismatch");
      }
      s_.unpacked.push_back(config_digest);
      return Status::ok();
    }
    Status putImage(const std::string& name, const oci::Descriptor& target) override {
      std::lock_guard<std::mutex> lock(s_.mu);
      if (!s_.blobs.count(target.digest)) return failedPrecondition("fake store: image target not stored");
      s_.images[name] = target;
      return Status::ok();
    }

   private:
    State& s_;
  };

  StatusOr<std::unique_ptr<Session>> begin(const std::string&) override {
    std::lock_guard<std::mutex> lock(state.mu);
    ++state.sessions_open;
    ++state.sessions_total;
    return std::unique_ptr<Session>(std::make_unique<FakeSession>(state));
  }

  State state;
};

class RegistryPullerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    scratch_ = ::testing::TempDir() + "/knap-pull-" + std::to_string(::getpid()) + "-" +
               ::testing::UnitTest::GetInstance()->current_test_info()->name();
    std::filesystem::remove_all(scratch_);
  }
  void TearDown() override { std::filesystem::remove_all(scratch_); }

  RegistryPuller::Options options() {
    RegistryPuller::Options o;
    o.platform = *oci::parsePlatform("linux/amd64");
    o.parallelism = 4;
    o.scratch_dir = scratch_;
    o.attempts = 3;
    o.backoff = std::chrono::milliseconds(5);
    o.sleep = [this](Duration d) {
      sleeps_.push_back(d);
      std::this_thread::sleep_for(d);
    };
    return o;
  }
  std::unique_ptr<RegistryClient> client(const TestRegistry& reg) {
    RegistryOptions o;
    o.insecure_registries = {reg.host()};
    o.connect_timeout = std::chrono::seconds(2);
    return std::make_unique<RegistryClient>(o, AuthConfig{}, RealTimeSource::instance());
  }
  bool scratchEmpty() { return !std::filesystem::exists(scratch_) || std::filesystem::is_empty(scratch_); }

  std::string scratch_;
  std::vector<Duration> sleeps_;
  FakeImageStore store_;
};

std::string bigLayer(char c, size_t n) {
  std::string s(n, c);
  for (size_t i = 0; i < n; i += 997) s[i] = static_cast<char>('a' + (i % 26));
  return s;
}

TEST_F(RegistryPullerTest, PullsIndexForThisPlatformAndNamesRecords) {
  TestRegistry reg;
  TestImage amd = testing::makeTestImage({bigLayer('a', 300000), "second"}, "amd64");
  TestImage arm = testing::makeTestImage({"arm only"}, "arm64");
  reg.push("team/app", "", amd);
  reg.push("team/app", "", arm);
  std::string index = testing::makeTestIndex(
      {{*oci::parsePlatform("linux/amd64"), &amd}, {*oci::parsePlatform("linux/arm64"), &arm}});
  std::string index_digest = reg.addManifest("team/app", "v1", oci::kMediaTypeOciIndex, index);
  auto rc = client(reg);
  RegistryPuller puller(*rc, store_, options());
  const std::string image = reg.host() + "/team/app:v1";

  auto resolved = puller.resolve(image);
  ASSERT_TRUE(resolved.isOk()) << resolved.status().toString();
  EXPECT_EQ(*resolved, reg.host() + "/team/app@" + index_digest);

  std::vector<PullProgress> seen;
  std::mutex mu;
  auto r = puller.pull(image, [&](const PullProgress& p) {
    std::lock_guard<std::mutex> lock(mu);
    seen.push_back(p);
  });
  ASSERT_TRUE(r.isOk()) << r.status().toString();
  EXPECT_EQ(r->manifest_digest, amd.manifest.digest);
  EXPECT_EQ(r->index_digest, index_digest);
  EXPECT_EQ(r->digest_ref, reg.host() + "/team/app@" + amd.manifest.digest);
  const int64_t total = amd.config.size + amd.layers[0].size + amd.layers[1].size;
  EXPECT_EQ(r->bytes_total, total);
  EXPECT_EQ(r->bytes_fetched, total);
  // Records: as requested, by manifest digest and by index digest; all at the manifest.
  for (const std::string& name : {image, r->digest_ref, reg.host() + "/team/app@" + index_digest}) {
    ASSERT_TRUE(store_.state.images.count(name)) << name;
    EXPECT_EQ(store_.state.images[name].digest, amd.manifest.digest);
  }
  // GC labels on the manifest and the index.
  auto& ml = store_.state.labels[amd.manifest.digest];
  EXPECT_EQ(ml["containerd.io/gc.ref.content.config"], amd.config.digest);
  EXPECT_EQ(ml["containerd.io/gc.ref.content.l.0"], amd.layers[0].digest);
  EXPECT_EQ(ml["containerd.io/gc.ref.content.l.1"], amd.layers[1].digest);
  EXPECT_EQ(store_.state.labels[index_digest]["containerd.io/gc.ref.content.m.0"], amd.manifest.digest);
  EXPECT_EQ(store_.state.unpacked, std::vector<std::string>{amd.config.digest});
  // Nothing of the arm64 image was fetched.
  EXPECT_EQ(reg.blobGets(arm.layers[0].digest), 0);
  EXPECT_EQ(store_.state.sessions_open, 0);
  EXPECT_TRUE(scratchEmpty());
  // Progress: phases in order, bytes reach the total.
  ASSERT_FALSE(seen.empty());
  EXPECT_EQ(seen.front().phase, "resolving");
  EXPECT_EQ(seen.back().phase, "done");
  EXPECT_EQ(seen.back().bytes_done, total);
  EXPECT_EQ(seen.back().blobs_done, 3);
  EXPECT_EQ(seen.back().blobs_total, 3);
  for (size_t i = 1; i < seen.size(); ++i) {
    EXPECT_GE(seen[i].bytes_done, seen[i - 1].bytes_done) << "progress never goes backwards";
  }

  // Again: everything is present, nothing is fetched.
  const int gets = reg.count("GET", "/blobs/");
  auto again = puller.pull(image);
  ASSERT_TRUE(again.isOk());
  EXPECT_EQ(again->bytes_fetched, 0);
  EXPECT_EQ(reg.count("GET", "/blobs/"), gets);
}

TEST_F(RegistryPullerTest, RemovesPartialFilesOfDeadProcessesOnly) {
  std::filesystem::create_directories(scratch_);
  // pid 0x7ffffffe is far above pid_max; ours is alive.
  const std::string dead = scratch_ + "/abc.2147483646-0.partial";
  const std::string alive = scratch_ + "/abc." + std::to_string(::getpid()) + "-7.partial";
  std::ofstream(dead) << "x";
  std::ofstream(alive) << "x";
  TestRegistry reg;
  auto rc = client(reg);
  RegistryPuller puller(*rc, store_, options());
  EXPECT_FALSE(std::filesystem::exists(dead));
  EXPECT_TRUE(std::filesystem::exists(alive));
}

TEST_F(RegistryPullerTest, DockerManifestListAndPullByDigest) {
  TestRegistry reg;
  TestImage amd = testing::makeTestImage({"docker layer"}, "amd64", true);
  reg.push("app", "", amd);
  std::string list = testing::makeTestIndex({{*oci::parsePlatform("linux/amd64"), &amd}}, true);
  std::string list_digest = reg.addManifest("app", "v2", oci::kMediaTypeDockerManifestList, list);
  auto rc = client(reg);
  RegistryPuller puller(*rc, store_, options());
  const std::string image = reg.host() + "/app@" + list_digest;
  auto resolved = puller.resolve(image);
  ASSERT_TRUE(resolved.isOk());
  EXPECT_EQ(*resolved, image);
  EXPECT_EQ(reg.requests().size(), 0u) << "a digest reference resolves without a request";
  auto r = puller.pull(image);
  ASSERT_TRUE(r.isOk()) << r.status().toString();
  EXPECT_EQ(r->manifest_digest, amd.manifest.digest);
  EXPECT_TRUE(store_.state.images.count(image));
}

TEST_F(RegistryPullerTest, NoManifestForPlatform) {
  TestRegistry reg;
  TestImage arm = testing::makeTestImage({"arm"}, "arm64");
  reg.push("app", "", arm);
  reg.addManifest("app", "v1", oci::kMediaTypeOciIndex,
                  testing::makeTestIndex({{*oci::parsePlatform("linux/arm64"), &arm}}));
  auto rc = client(reg);
  RegistryPuller puller(*rc, store_, options());
  auto r = puller.pull(reg.host() + "/app:v1");
  ASSERT_FALSE(r.isOk());
  EXPECT_EQ(r.status().code(), Code::kNotFound);
  EXPECT_EQ(pullFailureReason(r.status()), "ManifestUnknown");
  EXPECT_NE(r.status().message().find("linux/arm64"), std::string::npos) << r.status().message();
  EXPECT_EQ(pullFailureReason(puller.pull("Bad:Name").status()), "InvalidImageName");
}

TEST_F(RegistryPullerTest, CorruptedBlobIsRejectedAndNothingCommitted) {
  TestRegistry reg;
  TestImage img = testing::makeTestImage({bigLayer('c', 50000)});
  reg.push("app", "v1", img);
  reg.corruptBlob(img.layers[0].digest);
  auto rc = client(reg);
  RegistryPuller puller(*rc, store_, options());
  auto r = puller.pull(reg.host() + "/app:v1");
  ASSERT_FALSE(r.isOk());
  EXPECT_EQ(r.status().code(), Code::kDataLoss) << r.status().toString();
  EXPECT_EQ(pullFailureReason(r.status()), "DigestMismatch");
  EXPECT_NE(r.status().message().find("expected digest " + img.layers[0].digest), std::string::npos)
      << r.status().message();
  std::string actual = [&] {
    std::string d = img.blobs[img.layers[0].digest];
    d[d.size() / 2] ^= 0x5a;
    return oci::sha256Digest(d);
  }();
  EXPECT_NE(r.status().message().find(actual), std::string::npos) << r.status().message();
  EXPECT_EQ(store_.state.blobs.count(img.layers[0].digest), 0u);
  EXPECT_EQ(store_.state.blobs.count(img.manifest.digest), 0u);
  EXPECT_TRUE(store_.state.images.empty());
  EXPECT_TRUE(scratchEmpty());
  EXPECT_EQ(reg.blobGets(img.layers[0].digest), 1) << "a digest mismatch is not retried";
}

TEST_F(RegistryPullerTest, BrokenTransferIsResumedWithRange) {
  TestRegistry reg;
  TestImage img = testing::makeTestImage({bigLayer('r', 400000)});
  reg.push("app", "v1", img);
  reg.cutBlobOnce(img.layers[0].digest, 150000);
  auto rc = client(reg);
  RegistryPuller puller(*rc, store_, options());
  auto r = puller.pull(reg.host() + "/app:v1");
  ASSERT_TRUE(r.isOk()) << r.status().toString();
  EXPECT_EQ(reg.blobGets(img.layers[0].digest), 2);
  EXPECT_EQ(reg.rangeGets(img.layers[0].digest), 1);
  bool from_cut = false;
  for (const auto& q : reg.requests()) {
    if (q.headers.count("range")) from_cut = q.headers.at("range") == "bytes=150000-";
  }
  EXPECT_TRUE(from_cut) << "resumed from the bytes already received";
  EXPECT_EQ(store_.state.blobs[img.layers[0].digest], img.blobs[img.layers[0].digest]);
  EXPECT_EQ(r->bytes_fetched, img.config.size + img.layers[0].size) << "resumed bytes are not fetched twice";
  EXPECT_EQ(sleeps_.size(), 1u);
}

TEST_F(RegistryPullerTest, ServerIgnoringRangeRestartsFromZero) {
  TestRegistry reg;
  TestImage img = testing::makeTestImage({bigLayer('i', 200000)});
  reg.push("app", "v1", img);
  reg.cutBlobOnce(img.layers[0].digest, 70000);
  reg.setIgnoreRange(true);
  auto rc = client(reg);
  RegistryPuller puller(*rc, store_, options());
  auto r = puller.pull(reg.host() + "/app:v1");
  ASSERT_TRUE(r.isOk()) << r.status().toString();
  EXPECT_EQ(store_.state.blobs[img.layers[0].digest], img.blobs[img.layers[0].digest]);
}

TEST_F(RegistryPullerTest, ServerGoneIsUnavailableAfterRetries) {
  auto reg = std::make_unique<TestRegistry>();
  TestImage img = testing::makeTestImage({bigLayer('g', 300000)});
  reg->push("app", "v1", img);
  reg->cutBlobOnce(img.layers[0].digest, 1000);
  const std::string host = reg->host();
  auto rc = client(*reg);
  RegistryPuller::Options o = options();
  // The registry goes away after the first (cut) transfer.
  TestRegistry* raw = reg.get();
  o.sleep = [&, raw](Duration d) {
    sleeps_.push_back(d);
    raw->stop();
  };
  RegistryPuller puller(*rc, store_, o);
  auto r = puller.pull(host + "/app:v1");
  ASSERT_FALSE(r.isOk());
  EXPECT_EQ(r.status().code(), Code::kUnavailable) << r.status().toString();
  EXPECT_EQ(pullFailureReason(r.status()), "RegistryUnreachable");
  EXPECT_NE(r.status().message().find("after 3 attempts"), std::string::npos) << r.status().message();
  ASSERT_EQ(sleeps_.size(), 2u);
  EXPECT_EQ(sleeps_[1], 2 * sleeps_[0]) << "back-off doubles";
  EXPECT_TRUE(store_.state.images.empty());
  EXPECT_TRUE(scratchEmpty());
  // Server down from the start: the manifest fetch fails at once.
  auto again = puller.pull(host + "/app:v1");
  EXPECT_EQ(again.status().code(), Code::kUnavailable);
}

TEST_F(RegistryPullerTest, ConcurrentPullsOfOneImageShareOnePull) {
  TestRegistry reg;
  TestImage img = testing::makeTestImage({bigLayer('1', 500000), bigLayer('2', 500000)});
  reg.push("app", "v1", img);
  auto rc = client(reg);
  RegistryPuller puller(*rc, store_, options());
  std::vector<std::thread> ts;
  std::vector<StatusOr<PullResult>> results(6, Status(Code::kInternal, "unset"));
  std::atomic<int> progress_calls{0};
  for (int i = 0; i < 6; ++i) {
    ts.emplace_back([&, i] {
      results[i] = puller.pull(reg.host() + "/app:v1", [&](const PullProgress&) { ++progress_calls; });
    });
  }
  for (auto& t : ts) t.join();
  for (auto& r : results) {
    ASSERT_TRUE(r.isOk()) << r.status().toString();
    EXPECT_EQ(r->manifest_digest, img.manifest.digest);
  }
  for (const auto& [digest, data] : img.blobs) EXPECT_EQ(reg.blobGets(digest), 1) << digest;
  EXPECT_LE(reg.count("GET", "/manifests/"), 6);
  EXPECT_GT(progress_calls.load(), 0);
}

TEST_F(RegistryPullerTest, SharedLayerOfTwoImagesFetchedOnce) {
  TestRegistry reg;
  const std::string base = bigLayer('b', 800000);
  TestImage a = testing::makeTestImage({base, "app a"});
  TestImage b = testing::makeTestImage({base, "app b"});
  reg.push("a", "v1", a);
  reg.push("b", "v1", b);
  // The same layer under both repositories (a registry mounts it across).
  auto rc = client(reg);
  RegistryPuller puller(*rc, store_, options());
  StatusOr<PullResult> ra = Status(Code::kInternal, ""), rb = Status(Code::kInternal, "");
  std::thread ta([&] { ra = puller.pull(reg.host() + "/a:v1"); });
  std::thread tb([&] { rb = puller.pull(reg.host() + "/b:v1"); });
  ta.join();
  tb.join();
  ASSERT_TRUE(ra.isOk()) << ra.status().toString();
  ASSERT_TRUE(rb.isOk()) << rb.status().toString();
  EXPECT_EQ(reg.blobGets(a.layers[0].digest), 1);
  EXPECT_EQ(reg.blobGets(a.layers[1].digest), 1);
  EXPECT_EQ(reg.blobGets(b.layers[1].digest), 1);
  EXPECT_EQ(ra->bytes_fetched + rb->bytes_fetched,
            a.config.size + b.config.size + a.layers[0].size + a.layers[1].size + b.layers[1].size);
}

TEST_F(RegistryPullerTest, BlobRedirectToAnotherHostGetsNoCredentials) {
  TestRegistry reg(TestRegistry::Auth::kBearer, "u", "p");
  TestImage img = testing::makeTestImage({bigLayer('z', 100000)});
  reg.push("app", "v1", img);
  std::mutex mu;
  std::vector<testing::HttpRequest> cdn_log;
  testing::TestHttpServer cdn([&](const testing::HttpRequest& r) {
    std::lock_guard<std::mutex> lock(mu);
    cdn_log.push_back(r);
    testing::HttpResponse resp;
    const std::string digest = r.path.substr(r.path.rfind('/') + 1);
    auto it = img.blobs.find(digest);
    if (it == img.blobs.end()) {
      resp.status = 404;
    } else {
      resp.body = it->second;
    }
    return resp;
  });
  reg.setBlobRedirect("http://" + cdn.hostPort() + "/cdn");
  RegistryOptions ro;
  ro.insecure_registries = {reg.host()};
  RegistryClient rc(ro, AuthConfig{{reg.host(), Credential{"u", "p"}}}, RealTimeSource::instance());
  RegistryPuller puller(rc, store_, options());
  auto r = puller.pull(reg.host() + "/app:v1");
  ASSERT_TRUE(r.isOk()) << r.status().toString();
  std::lock_guard<std::mutex> lock(mu);
  ASSERT_EQ(cdn_log.size(), 2u);  // config + layer
  for (const auto& q : cdn_log)
    EXPECT_EQ(q.headers.count("authorization"), 0u) << "token leaked to " << q.path;
}

TEST_F(RegistryPullerTest, BearerAuthPullAndWrongCredentials) {
  TestRegistry reg(TestRegistry::Auth::kBearer, "u", "p");
  TestImage img = testing::makeTestImage({"secret layer"});
  reg.push("private/app", "v1", img);
  RegistryOptions ro;
  ro.insecure_registries = {reg.host()};
  RegistryClient good(ro, AuthConfig{{reg.host(), Credential{"u", "p"}}}, RealTimeSource::instance());
  RegistryPuller puller(good, store_, options());
  auto r = puller.pull(reg.host() + "/private/app:v1");
  ASSERT_TRUE(r.isOk()) << r.status().toString();
  EXPECT_EQ(reg.tokenRequests(), 1);

  FakeImageStore other;
  ro.auth_file = "/etc/knap/registry-auth.json";
  RegistryClient bad(ro, AuthConfig{{reg.host(), Credential{"u", "nope"}}}, RealTimeSource::instance());
  RegistryPuller bad_puller(bad, other, options());
  auto f = bad_puller.pull(reg.host() + "/private/app:v1");
  ASSERT_FALSE(f.isOk());
  EXPECT_EQ(f.status().code(), Code::kUnauthenticated);
  EXPECT_EQ(pullFailureReason(f.status()), "Unauthorized");
  EXPECT_NE(f.status().message().find("check the credentials for " + reg.host() +
                                      " in /etc/knap/registry-auth.json"),
            std::string::npos)
      << f.status().message();
}

}  // namespace
}  // namespace knap::images
