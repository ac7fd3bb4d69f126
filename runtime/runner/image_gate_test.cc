#include "runtime/runner/image_gate.h"

#include <gtest/gtest.h>

#include <deque>

#include "images/fake_puller.h"
#include "runtime/runner/pod_runner.h"
#include "tests/fakes/fake_event_recorder.h"
#include "tests/fakes/fake_revision_backend.h"

namespace knap::runner {
namespace {

using controller::RevisionHealth;
using images::ImagePhase;
using nlohmann::json;
using std::chrono::seconds;

constexpr char kTag[] = "127.0.0.1:5000/app:v1";
constexpr char kD1[] =
    "127.0.0.1:5000/app@sha256:1111111111111111111111111111111111111111111111111111111111111111";
constexpr char kD2[] =
    "127.0.0.1:5000/app@sha256:2222222222222222222222222222222222222222222222222222222222222222";

json revision(const std::string& name, const std::string& image) {
  return json{{"apiVersion", "serving.knative.dev/v1"},
              {"kind", "Revision"},
              {"metadata", {{"namespace", "default"}, {"name", name}, {"labels", {{"a", "1"}}}}},
              {"spec", {{"containers", json::array({json{{"name", "user-container"}, {"image", image}}})}}}};
}

// ConditionsBuilder::aggregate as the controller computes Ready.
controller::ConditionState ready(const RevisionHealth& h) {
  for (const auto* c : {&h.resources_available, &h.container_healthy}) {
    if (c->status == "False") return *c;
  }
  for (const auto* c : {&h.resources_available, &h.container_healthy}) {
    if (c->status != "True") return {"Unknown", c->reason, c->message};
  }
  return {"True", "", ""};
}

class ImageGateTest : public ::testing::Test {
 protected:
  ImageGateTest() {
    puller_.tags[kTag] = kD1;
    puller_.now_fn = [this] { return clock_.now(); };
    images::PrePullerOptions o;
    o.executor = [this](std::function<void()> f) { queue_.push_back(std::move(f)); };
    o.retry_max = seconds(8);
    pp_ = std::make_unique<images::PrePuller>(
        puller_, [this](const std::string& ref) { return puller_.isPresent(ref); }, clock_, o);
    gate_ = std::make_unique<ImageGate>(inner_, *pp_, events_);
    gate_->setOnChange([this](const std::string& ns, const std::string& name) {
      std::lock_guard<std::mutex> l(mu_);
      ++changes_[ns + "/" + name];
    });
  }
  void settle() {
    for (int i = 0; i < 10; ++i) {
      pp_->runOnce();
      if (queue_.empty()) return;
      while (!queue_.empty()) {
        auto f = std::move(queue_.front());
        queue_.pop_front();
        f();
      }
    }
  }
  int changes(const std::string& key) {
    std::lock_guard<std::mutex> l(mu_);
    return changes_[key];
  }
  std::string ensuredImage(const std::string& name) {
    json j = inner_.lastEnsured("default", name);
    return j.is_null() ? "" : j["spec"]["containers"][0]["image"].get<std::string>();
  }

  SimulatedTimeSource clock_;
  images::FakePuller puller_;
  std::deque<std::function<void()>> queue_;
  std::unique_ptr<images::PrePuller> pp_;
  testing::FakeRevisionBackend inner_;
  testing::FakeEventRecorder events_;
  std::unique_ptr<ImageGate> gate_;
  std::mutex mu_;
  std::map<std::string, int> changes_;
};

TEST(FormatRfc3339Nano, TrimsTrailingZeros) {
  WallTime t = std::chrono::system_clock::from_time_t(1767225600);
  EXPECT_EQ(formatRfc3339Nano(t), "2026-01-01T00:00:00Z");
  EXPECT_EQ(formatRfc3339Nano(t + std::chrono::nanoseconds(123456789)), "2026-01-01T00:00:00.123456789Z");
  EXPECT_EQ(formatRfc3339Nano(t + std::chrono::milliseconds(250)), "2026-01-01T00:00:00.25Z");
  WallTime back;
  ASSERT_TRUE(parseRfc3339(formatRfc3339Nano(t + std::chrono::milliseconds(250)), &back));
}

TEST_F(ImageGateTest, APullIsReportedAsPullingThenPulledOnTheRevision) {
  gate_->ensure(revision("app-00001", kTag));
  clock_.advance(seconds(2));
  settle();
  ASSERT_TRUE(gate_->forwarded("default", "app-00001"));
  EXPECT_EQ(events_.reasons(), (std::vector<std::string>{"Pulling", "Pulled"}));
  auto pulled = events_.byReason("Pulled");
  ASSERT_EQ(pulled.size(), 1u);
  EXPECT_EQ(pulled[0].object.kind, "Revision");
  EXPECT_EQ(pulled[0].object.name, "app-00001");
  EXPECT_EQ(pulled[0].type, EventType::kNormal);
  EXPECT_EQ(pulled[0].component, "knap-images");
  EXPECT_NE(pulled[0].message.find(std::string("image \"") + kTag + "\""), std::string::npos)
      << pulled[0].message;
  // Later syncs of the same phase report nothing new.
  gate_->ensure(revision("app-00001", kTag));
  settle();
  EXPECT_EQ(events_.all().size(), 2u);
}

TEST_F(ImageGateTest, TheRevisionReachesItsPodsOnlyOnceTheImageIsPresent) {
  gate_->ensure(revision("app-00001", kTag));
  EXPECT_FALSE(gate_->forwarded("default", "app-00001"));
  RevisionHealth h = gate_->health("default", "app-00001");
  EXPECT_EQ(h.resources_available.status, "Unknown");
  EXPECT_EQ(h.container_healthy.reason, "ResolvingDigest");
  EXPECT_EQ(ready(h).status, "Unknown");
  EXPECT_EQ(h.image_digest, "");

  // Resolution pins the digest before the pull is done.
  pp_->runOnce();
  ASSERT_EQ(queue_.size(), 1u);
  queue_.front()();
  queue_.pop_front();
  h = gate_->health("default", "app-00001");
  EXPECT_EQ(h.image_digest, kD1);
  EXPECT_EQ(ready(h).reason, "PullingImage");
  EXPECT_FALSE(gate_->forwarded("default", "app-00001"));

  std::vector<RevisionHealth> during;
  puller_.during_pull = [&](const images::ProgressFn& progress) {
    images::PullProgress p;
    p.phase = "fetching";
    p.bytes_done = 12'300'000;
    p.bytes_total = 40'100'000;
    progress(p);
    during.push_back(gate_->health("default", "app-00001"));
  };
  int before = changes("default/app-00001");
  clock_.advance(seconds(2));
  settle();
  ASSERT_EQ(during.size(), 1u);
  EXPECT_EQ(during[0].container_healthy.status, "Unknown");
  EXPECT_EQ(during[0].container_healthy.reason, "PullingImage");
  EXPECT_EQ(ready(during[0]).message, "pulling 127.0.0.1:5000/app:v1: 12.3 of 40.1 MB");
  EXPECT_GE(changes("default/app-00001") - before, 2);  // progress + present

  ASSERT_TRUE(gate_->forwarded("default", "app-00001"));
  json given = inner_.lastEnsured("default", "app-00001");
  EXPECT_EQ(given["spec"]["containers"][0]["image"], kD1);
  EXPECT_EQ(given["metadata"]["annotations"][kImageReadyAtAnnotation], formatRfc3339Nano(clock_.now()));
  EXPECT_EQ(given["metadata"]["labels"]["a"], "1");

  // From now on the pods' health, with the pinned digest.
  h = gate_->health("default", "app-00001");
  EXPECT_EQ(h.container_healthy.reason, "Deploying");
  inner_.setReady("default", "app-00001", "127.0.0.1:5000/app@sha256:manifest");
  h = gate_->health("default", "app-00001");
  EXPECT_EQ(ready(h).status, "True");
  EXPECT_EQ(h.image_digest, kD1);
}

// Multi-container Revisions: every container's image is resolved, pinned and
// pulled; the Revision waits for all of them and a sidecar image's failure is
// its condition.
TEST_F(ImageGateTest, EveryContainersImageIsPinnedAndPulled) {
  const std::string side_tag = "127.0.0.1:5000/side:v1";
  const std::string side_digest =
      "127.0.0.1:5000/side@sha256:3333333333333333333333333333333333333333333333333333333333333333";
  puller_.tags[side_tag] = side_digest;
  puller_.pull_error[side_digest] = unauthenticated("401 Unauthorized");
  json rev = revision("app-00001", kTag);
  rev["spec"]["containers"].push_back({{"name", "side"}, {"image", side_tag}});
  gate_->ensure(rev);
  clock_.advance(seconds(2));
  settle();
  RevisionHealth h = gate_->health("default", "app-00001");
  EXPECT_FALSE(gate_->forwarded("default", "app-00001")) << "the sidecar's image is not there";
  EXPECT_EQ(h.container_healthy.status, "False");
  EXPECT_EQ(h.container_healthy.reason, "Unauthorized");
  EXPECT_NE(h.container_healthy.message.find("container 1"), std::string::npos)
      << h.container_healthy.message;
  EXPECT_EQ(h.image_digests, std::vector<std::string>({kD1, side_digest}));

  puller_.pull_error.clear();
  clock_.advance(seconds(1));
  settle();
  ASSERT_TRUE(gate_->forwarded("default", "app-00001"));
  json given = inner_.lastEnsured("default", "app-00001");
  EXPECT_EQ(given["spec"]["containers"][0]["image"], kD1);
  EXPECT_EQ(given["spec"]["containers"][1]["image"], side_digest);
  std::set<std::string> in_use = gate_->imagesInUse();
  EXPECT_TRUE(in_use.count(side_tag) && in_use.count(side_digest) && in_use.count(kD1));
  gate_->remove("default", "app-00001");
  EXPECT_TRUE(gate_->imagesInUse().empty());
}

TEST_F(ImageGateTest, APullFailureIsAConditionAndTheBackoffRetryRecovers) {
  puller_.pull_error[kD1] =
      unauthenticated("pulling from 127.0.0.1:5000: 401 Unauthorized: check registry-auth-file");
  gate_->ensure(revision("app-00001", kTag));
  settle();
  RevisionHealth h = gate_->health("default", "app-00001");
  EXPECT_EQ(h.container_healthy.status, "False");
  EXPECT_EQ(h.container_healthy.reason, "Unauthorized");
  EXPECT_EQ(ready(h).status, "False");
  EXPECT_EQ(ready(h).reason, "Unauthorized");
  EXPECT_NE(h.container_healthy.message.find("127.0.0.1:5000"), std::string::npos)
      << h.container_healthy.message;
  EXPECT_EQ(h.image_digest, kD1);  // pinned even though the pull failed
  EXPECT_FALSE(gate_->forwarded("default", "app-00001"));

  puller_.pull_error.clear();  // credentials fixed
  clock_.advance(seconds(1));
  int before = changes("default/app-00001");
  settle();
  EXPECT_TRUE(gate_->forwarded("default", "app-00001"));
  EXPECT_GT(changes("default/app-00001"), before);
  EXPECT_EQ(gate_->health("default", "app-00001").container_healthy.reason, "Deploying");
}

TEST_F(ImageGateTest, TheDigestInTheRevisionsStatusIsUsedNotResolvedAgain) {
  puller_.present[kD1] = clock_.now() - seconds(3600);
  puller_.tags[kTag] = kD2;  // the tag moved since the Revision was pinned
  json rev = revision("app-00001", kTag);
  rev["status"]["containerStatuses"] = json::array({{{"name", "user-container"}, {"imageDigest", kD1}}});
  gate_->ensure(rev);
  settle();
  EXPECT_EQ(puller_.resolves, 0);
  EXPECT_EQ(puller_.pulls, 0);
  EXPECT_EQ(ensuredImage("app-00001"), kD1);
  EXPECT_EQ(gate_->health("default", "app-00001").image_digest, kD1);

  // A new Revision of the same tag resolves the new digest.
  gate_->ensure(revision("app-00002", kTag));
  settle();
  EXPECT_EQ(puller_.resolves, 1);
  EXPECT_EQ(ensuredImage("app-00002"), kD2);
  EXPECT_EQ(gate_->health("default", "app-00002").image_digest, kD2);
  EXPECT_EQ(ensuredImage("app-00001"), kD1);
}

TEST_F(ImageGateTest, ARevisionReadyBeforeARestartGoesToItsPodsAtOnce) {
  puller_.present[kD1] = clock_.now() - seconds(3600);
  json rev = revision("app-00001", kTag);
  rev["status"]["containerStatuses"] = json::array({{{"name", "user-container"}, {"imageDigest", kD1}}});
  rev["status"]["conditions"] = json::array({{{"type", "Ready"}, {"status", "True"}}});
  gate_->ensure(rev);
  // No image work has run yet: the running pods are adopted right away.
  ASSERT_TRUE(gate_->forwarded("default", "app-00001"));
  EXPECT_EQ(ensuredImage("app-00001"), kD1);
  inner_.setReady("default", "app-00001");
  EXPECT_EQ(ready(gate_->health("default", "app-00001")).status, "True");
  settle();
  EXPECT_EQ(puller_.presence_checks, 1);
  // Found present: nothing more for the pods (their image was there before the restart).
  EXPECT_EQ(inner_.ensured().size(), 1u);
  json given = inner_.lastEnsured("default", "app-00001");
  EXPECT_FALSE(given["metadata"].contains("annotations") &&
               given["metadata"]["annotations"].contains(kImageReadyAtAnnotation));
  EXPECT_EQ(ready(gate_->health("default", "app-00001")).status, "True");
  EXPECT_EQ(puller_.pulls, 0);
}

TEST_F(ImageGateTest, MetadataChangesAfterForwardingKeepThePinnedImage) {
  gate_->ensure(revision("app-00001", kTag));
  settle();
  ASSERT_EQ(inner_.ensured().size(), 1u);
  json rev = revision("app-00001", kTag);
  rev["metadata"]["labels"]["serving.knative.dev/routingState"] = "active";
  gate_->ensure(rev);
  ASSERT_EQ(inner_.ensured().size(), 2u);
  json given = inner_.lastEnsured("default", "app-00001");
  EXPECT_EQ(given["metadata"]["labels"]["serving.knative.dev/routingState"], "active");
  EXPECT_EQ(given["spec"]["containers"][0]["image"], kD1);
  EXPECT_TRUE(given["metadata"]["annotations"].contains(kImageReadyAtAnnotation));
  gate_->ensure(rev);  // unchanged: not forwarded again
  EXPECT_EQ(inner_.ensured().size(), 2u);
}

TEST_F(ImageGateTest, SkipListImagesMustBeImported) {
  const std::string image = "dev.local/app:v1";
  gate_->ensure(revision("app-00001", image));
  settle();
  RevisionHealth h = gate_->health("default", "app-00001");
  EXPECT_EQ(h.container_healthy.status, "False");
  EXPECT_EQ(h.container_healthy.reason, "ContainerMissing");
  EXPECT_NE(h.container_healthy.message.find("knap image import"), std::string::npos);
  puller_.present[image] = clock_.now();
  clock_.advance(seconds(1));
  settle();
  EXPECT_EQ(ensuredImage("app-00001"), image);
  inner_.setReady("default", "app-00001", "dev.local/app@sha256:abc");
  EXPECT_EQ(gate_->health("default", "app-00001").image_digest, "dev.local/app@sha256:abc");
  EXPECT_EQ(puller_.resolves + puller_.pulls, 0);
}

TEST_F(ImageGateTest, RemoveForwardsAndTheImageIsNoLongerInUse) {
  gate_->ensure(revision("app-00001", kTag));
  settle();
  std::set<std::string> in_use = gate_->imagesInUse();
  EXPECT_TRUE(in_use.count(kTag));
  EXPECT_TRUE(in_use.count(kD1));
  gate_->remove("default", "app-00001");
  EXPECT_EQ(inner_.removed(), (std::vector<std::string>{"default/app-00001"}));
  EXPECT_TRUE(gate_->imagesInUse().empty());
  // A late image notification does not bring the Revision back.
  settle();
  EXPECT_EQ(inner_.ensured().size(), 1u);
}

TEST_F(ImageGateTest, ARevisionWithoutAnImageIsTheInnerBackendsToJudge) {
  json rev = revision("app-00001", "");
  gate_->ensure(rev);
  EXPECT_TRUE(gate_->forwarded("default", "app-00001"));
  inner_.setFailed("default", "app-00001", "InvalidSpec", "no image");
  EXPECT_EQ(gate_->health("default", "app-00001").container_healthy.reason, "InvalidSpec");
}

}  // namespace
}  // namespace knap::runner
