#include "images/pre_puller.h"

#include <gtest/gtest.h>

#include <deque>
#include <map>
#include <mutex>

#include "images/fake_puller.h"

namespace knap::images {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;

constexpr char kTag[] = "reg.example:5000/app:v1";
constexpr char kD1[] =
    "reg.example:5000/app@sha256:1111111111111111111111111111111111111111111111111111111111111111";
constexpr char kD2[] =
    "reg.example:5000/app@sha256:2222222222222222222222222222222222222222222222222222222222222222";

class PrePullerTest : public ::testing::Test {
 protected:
  PrePullerTest() {
    puller_.tags[kTag] = kD1;
    puller_.now_fn = [this] { return clock_.now(); };
  }

  PrePuller& make(PrePullerOptions o = {}) {
    o.executor = [this](std::function<void()> f) { queue_.push_back(std::move(f)); };
    o.retry_max = o.retry_max == PrePullerOptions{}.retry_max ? seconds(8) : o.retry_max;
    pp_ = std::make_unique<PrePuller>(
        puller_, [this](const std::string& ref) { return puller_.isPresent(ref); }, clock_, o);
    pp_->setOnChange([this](const std::string& r) {
      std::lock_guard<std::mutex> l(notes_mu_);
      notes_.push_back(r);
    });
    return *pp_;
  }
  // Starts due work and runs it, until nothing more is queued.
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
  int notesFor(const std::string& r) {
    std::lock_guard<std::mutex> l(notes_mu_);
    return static_cast<int>(std::count(notes_.begin(), notes_.end(), r));
  }

  SimulatedTimeSource clock_;
  FakePuller puller_;
  std::deque<std::function<void()>> queue_;
  std::unique_ptr<PrePuller> pp_;
  std::mutex notes_mu_;
  std::vector<std::string> notes_;
};

TEST(PrePullerHelpers, RegistryOfFollowsDockersRule) {
  EXPECT_EQ(registryOf("127.0.0.1:5000/app:v1"), "127.0.0.1:5000");
  EXPECT_EQ(registryOf("dev.local/app"), "dev.local");
  EXPECT_EQ(registryOf("localhost/app@sha256:abc"), "localhost");
  EXPECT_EQ(registryOf("nginx"), "docker.io");
  EXPECT_EQ(registryOf("team/app:v3"), "docker.io");
  EXPECT_TRUE(hasDigest(kD1));
  EXPECT_FALSE(hasDigest(kTag));
}

TEST(PrePullerHelpers, ProgressMessage) {
  PullProgress p;
  p.phase = "fetching";
  p.bytes_done = 12'300'000;
  p.bytes_total = 40'100'000;
  EXPECT_EQ(progressMessage("app:v1", p), "pulling app:v1: 12.3 of 40.1 MB");
  p.phase = "resolving";
  p.bytes_total = 0;
  EXPECT_EQ(progressMessage("app:v1", p), "pulling app:v1: resolving");
}

TEST_F(PrePullerTest, TagIsResolvedOncePinnedThenPulled) {
  PrePuller& pp = make();
  ImageStatus s = pp.status("ns/rev-1", kTag);
  EXPECT_EQ(s.phase, ImagePhase::kPending);
  EXPECT_EQ(s.reason, "ResolvingDigest");
  EXPECT_EQ(s.ref, "");

  pp.runOnce();
  ASSERT_EQ(queue_.size(), 1u);  // the resolve
  queue_.front()();
  queue_.pop_front();
  EXPECT_EQ(puller_.resolves, 1);
  s = pp.status("ns/rev-1", kTag);
  EXPECT_EQ(s.phase, ImagePhase::kPending);
  EXPECT_EQ(s.reason, "PullingImage");
  EXPECT_EQ(s.digest_ref, kD1);
  EXPECT_GE(notesFor("ns/rev-1"), 1);

  clock_.advance(seconds(3));
  settle();
  s = pp.status("ns/rev-1", kTag);
  EXPECT_EQ(s.phase, ImagePhase::kReady);
  EXPECT_EQ(s.ref, kD1);
  EXPECT_EQ(s.digest_ref, kD1);
  EXPECT_EQ(s.ready_at, clock_.now());
  EXPECT_EQ(puller_.resolves, 1);
  ASSERT_EQ(puller_.pulls, 1);
  EXPECT_EQ(puller_.pulled[0], kD1);  // pods are created from the pinned ref
  EXPECT_GE(notesFor("ns/rev-1"), 2);

  // Asked again with its pin (as the gate does from the Revision's status): no new work.
  settle();
  EXPECT_EQ(pp.status("ns/rev-1", kTag, kD1).phase, ImagePhase::kReady);
  EXPECT_EQ(puller_.resolves, 1);
  EXPECT_EQ(puller_.pulls, 1);
}

TEST_F(PrePullerTest, ProgressIsInTheMessageWhilePulling) {
  PrePuller& pp = make();
  std::vector<ImageStatus> seen;
  puller_.during_pull = [&](const ProgressFn& progress) {
    PullProgress p;
    p.image = kD1;
    p.phase = "fetching";
    p.bytes_total = 40'100'000;
    p.bytes_done = 12'300'000;
    progress(p);
    seen.push_back(pp.status("ns/rev-1", kTag));
    p.bytes_done = 20'000'000;
    progress(p);  // within progress_interval: no second notification
    seen.push_back(pp.status("ns/rev-1", kTag));
  };
  pp.status("ns/rev-1", kTag);
  int before = 0;
  pp.runOnce();
  queue_.front()();  // resolve
  queue_.pop_front();
  before = notesFor("ns/rev-1");
  settle();
  ASSERT_EQ(seen.size(), 2u);
  EXPECT_EQ(seen[0].phase, ImagePhase::kPending);
  EXPECT_EQ(seen[0].reason, "PullingImage");
  EXPECT_EQ(seen[0].message, "pulling reg.example:5000/app:v1: 12.3 of 40.1 MB");
  EXPECT_EQ(seen[1].message, "pulling reg.example:5000/app:v1: 20.0 of 40.1 MB");
  // One progress note (throttled) + one for Ready.
  EXPECT_EQ(notesFor("ns/rev-1") - before, 2);
}

TEST_F(PrePullerTest, ManyRequestersOfOneImageShareOneResolveAndOnePull) {
  PrePuller& pp = make();
  for (int i = 0; i < 5; ++i) pp.status("ns/rev-" + std::to_string(i), kTag);
  settle();
  EXPECT_EQ(puller_.resolves, 1);
  EXPECT_EQ(puller_.pulls, 1);
  for (int i = 0; i < 5; ++i) {
    ImageStatus s = pp.status("ns/rev-" + std::to_string(i), kTag);
    EXPECT_EQ(s.phase, ImagePhase::kReady) << i;
    EXPECT_EQ(s.ref, kD1) << i;
    EXPECT_GE(notesFor("ns/rev-" + std::to_string(i)), 1) << i;
  }
}

TEST_F(PrePullerTest, ANewRequesterResolvesTheTagAgainAndTheOldOneKeepsItsPin) {
  PrePuller& pp = make();
  pp.status("ns/rev-1", kTag);
  settle();
  ASSERT_EQ(pp.status("ns/rev-1", kTag).ref, kD1);

  puller_.tags[kTag] = kD2;  // re-pushed
  pp.status("ns/rev-2", kTag);
  settle();
  EXPECT_EQ(puller_.resolves, 2);
  EXPECT_EQ(pp.status("ns/rev-2", kTag).ref, kD2);
  EXPECT_EQ(pp.status("ns/rev-2", kTag).phase, ImagePhase::kReady);
  EXPECT_EQ(pp.status("ns/rev-1", kTag).ref, kD1);
  EXPECT_EQ(pp.status("ns/rev-1", kTag).phase, ImagePhase::kReady);
  std::set<std::string> in_use = pp.imagesInUse();
  EXPECT_TRUE(in_use.count(kD1));
  EXPECT_TRUE(in_use.count(kD2));
  EXPECT_TRUE(in_use.count(kTag));
}

TEST_F(PrePullerTest, APinnedRefIsNotResolvedAndAPresentImageIsNotPulled) {
  WallTime imported = clock_.now();
  puller_.present[kD1] = imported;
  clock_.advance(seconds(100));
  PrePuller& pp = make();
  puller_.tags[kTag] = kD2;  // the tag moved since the Revision was pinned
  pp.status("ns/rev-1", kTag, kD1);
  settle();
  ImageStatus s = pp.status("ns/rev-1", kTag, kD1);
  EXPECT_EQ(s.phase, ImagePhase::kReady);
  EXPECT_EQ(s.ref, kD1);
  EXPECT_EQ(s.ready_at, imported);  // when it became present, not when we looked
  EXPECT_EQ(puller_.resolves, 0);
  EXPECT_EQ(puller_.pulls, 0);
}

TEST_F(PrePullerTest, AnImageWithADigestIsPulledAsIs) {
  PrePuller& pp = make();
  pp.status("ns/rev-1", kD2);
  settle();
  ImageStatus s = pp.status("ns/rev-1", kD2);
  EXPECT_EQ(s.phase, ImagePhase::kReady);
  EXPECT_EQ(s.ref, kD2);
  EXPECT_EQ(s.digest_ref, kD2);
  EXPECT_EQ(puller_.resolves, 0);
  ASSERT_EQ(puller_.pulls, 1);
}

TEST_F(PrePullerTest, SkipListImagesMustBeImportedAndAreFoundOnceTheyAre) {
  PrePullerOptions o;
  o.retry_max = seconds(60);  // pulls would back off to a minute; look-ups stop at 10s
  PrePuller& pp = make(o);
  const std::string image = "dev.local/app:v1";
  pp.status("ns/rev-1", image);
  settle();
  ImageStatus s = pp.status("ns/rev-1", image);
  EXPECT_EQ(s.phase, ImagePhase::kFailed);
  EXPECT_EQ(s.reason, "ContainerMissing");
  EXPECT_NE(s.message.find("knap image import"), std::string::npos) << s.message;
  EXPECT_NE(s.message.find(image), std::string::npos) << s.message;
  EXPECT_EQ(puller_.resolves, 0);
  EXPECT_EQ(puller_.pulls, 0);

  // Looked for again with a short cap: 1s, 2s, 4s, 8s, 10s, 10s.
  for (int gap : {1, 2, 4, 8, 10, 10}) {
    ASSERT_EQ(pp.nextDue(), clock_.monotonic() + seconds(gap));
    clock_.advance(seconds(gap));
    settle();
  }
  EXPECT_EQ(pp.status("ns/rev-1", image).phase, ImagePhase::kFailed);
  puller_.present[image] = clock_.now();  // `knap image import`
  clock_.advance(seconds(10));
  settle();
  s = pp.status("ns/rev-1", image);
  EXPECT_EQ(s.phase, ImagePhase::kReady);
  EXPECT_EQ(s.ref, image);
  EXPECT_EQ(s.digest_ref, "");  // nothing resolved: the pod runner reports the digest
  EXPECT_EQ(puller_.pulls, 0);
}

TEST_F(PrePullerTest, FailuresAreRetriedWithExponentialBackoffUpToTheCap) {
  PrePuller& pp = make();  // retry 1s doubling, capped at 8s
  puller_.pull_error[kD1] = unavailable("connect to reg.example:5000: connection refused");
  pp.status("ns/rev-1", kTag);
  settle();
  ImageStatus s = pp.status("ns/rev-1", kTag);
  EXPECT_EQ(s.phase, ImagePhase::kFailed);
  EXPECT_EQ(s.reason, "RegistryUnreachable");
  EXPECT_NE(s.message.find("reg.example:5000"), std::string::npos) << s.message;
  EXPECT_EQ(s.message.find("attempt"), std::string::npos)
      << "no retry counter in a condition message: " << s.message;
  EXPECT_EQ(puller_.pulls, 1);
  const ImageStatus first = s;

  const std::vector<int> gaps_ms = {1000, 2000, 4000, 8000, 8000};
  for (size_t i = 0; i < gaps_ms.size(); ++i) {
    ASSERT_EQ(pp.nextDue(), clock_.monotonic() + milliseconds(gaps_ms[i])) << i;
    clock_.advance(milliseconds(gaps_ms[i] - 1));
    settle();
    EXPECT_EQ(puller_.pulls, static_cast<int>(i) + 1) << "retried before its back-off, step " << i;
    clock_.advance(milliseconds(1));
    settle();
    EXPECT_EQ(puller_.pulls, static_cast<int>(i) + 2) << i;
    EXPECT_EQ(pp.status("ns/rev-1", kTag), first)
        << "a retry that fails the same way changes nothing, step " << i;
  }
  // The registry comes back: the next retry makes it Ready by itself.
  puller_.pull_error.clear();
  clock_.advance(seconds(8));
  settle();
  EXPECT_EQ(pp.status("ns/rev-1", kTag).phase, ImagePhase::kReady);
  EXPECT_EQ(puller_.resolves, 1);
}

TEST_F(PrePullerTest, ResolveFailuresBecomeActionableReasons) {
  PrePuller& pp = make();
  puller_.resolve_error["reg.example:5000/private:v1"] =
      unauthenticated("reg.example:5000: 401 Unauthorized");
  pp.status("ns/a", "reg.example:5000/private:v1");
  pp.status("ns/b", "reg.example:5000/app:nope");
  pp.status("ns/c", "Bad/Name");
  puller_.resolve_error["Bad/Name"] = invalidArgument("invalid reference \"Bad/Name\"");
  settle();
  ImageStatus a = pp.status("ns/a", "reg.example:5000/private:v1");
  EXPECT_EQ(a.phase, ImagePhase::kFailed);
  EXPECT_EQ(a.reason, "Unauthorized");
  EXPECT_NE(a.message.find("reg.example:5000"), std::string::npos);
  EXPECT_EQ(pp.status("ns/b", "reg.example:5000/app:nope").reason, "ManifestUnknown");
  EXPECT_EQ(pp.status("ns/c", "Bad/Name").reason, "InvalidImageName");
  EXPECT_EQ(puller_.pulls, 0);
  EXPECT_GE(notesFor("ns/a"), 1);

  // Fixed credentials: the back-off retry resolves and pulls.
  puller_.resolve_error.erase("reg.example:5000/private:v1");
  puller_.tags["reg.example:5000/private:v1"] = kD2;
  clock_.advance(seconds(1));
  settle();
  EXPECT_EQ(pp.status("ns/a", "reg.example:5000/private:v1").phase, ImagePhase::kReady);
}

TEST_F(PrePullerTest, ARetryThatShowsProgressIsPendingAgain) {
  PrePuller& pp = make();
  puller_.pull_error[kD1] = unavailable("reg.example:5000: transfer closed");
  pp.status("ns/rev-1", kTag);
  settle();
  ASSERT_EQ(pp.status("ns/rev-1", kTag).phase, ImagePhase::kFailed);
  std::vector<ImagePhase> during;
  puller_.during_pull = [&](const ProgressFn& progress) {
    during.push_back(pp.status("ns/rev-1", kTag).phase);  // still the last failure
    PullProgress p;
    p.phase = "fetching";
    p.bytes_total = 1000;
    p.bytes_done = 10;
    progress(p);
    during.push_back(pp.status("ns/rev-1", kTag).phase);
  };
  puller_.pull_error.clear();
  clock_.advance(seconds(1));
  settle();
  ASSERT_EQ(during.size(), 2u);
  EXPECT_EQ(during[0], ImagePhase::kFailed);
  EXPECT_EQ(during[1], ImagePhase::kPending);
  EXPECT_EQ(pp.status("ns/rev-1", kTag).phase, ImagePhase::kReady);
}

TEST_F(PrePullerTest, PrePullImagesArePulledAtStartAndAgainWhenMissing) {
  PrePullerOptions o;
  o.pre_pull_images = {kTag};
  o.recheck_interval = seconds(60);
  PrePuller& pp = make(o);
  settle();  // what start() does first
  ASSERT_EQ(puller_.pulls, 1);
  EXPECT_EQ(puller_.pulled[0], kTag);  // by tag: the tag name is kept too
  EXPECT_TRUE(pp.imagesInUse().count(kTag));

  clock_.advance(seconds(60));
  settle();
  EXPECT_EQ(puller_.pulls, 1);  // still present: only checked
  puller_.present.clear();      // deleted behind our back
  clock_.advance(seconds(60));
  settle();
  EXPECT_EQ(puller_.pulls, 2);
  EXPECT_TRUE(puller_.present.count(kTag));
}

TEST_F(PrePullerTest, AReadyImageThatGoesMissingIsPulledAgainAndStaysReady) {
  PrePullerOptions o;
  o.recheck_interval = seconds(60);
  PrePuller& pp = make(o);
  pp.status("ns/rev-1", kTag);
  settle();
  WallTime ready_at = pp.status("ns/rev-1", kTag).ready_at;
  puller_.present.clear();
  puller_.pull_error[kD1] = unavailable("reg.example:5000: connection refused");
  clock_.advance(seconds(60));
  settle();
  EXPECT_EQ(puller_.pulls, 2);
  EXPECT_EQ(pp.status("ns/rev-1", kTag).phase, ImagePhase::kReady);  // pods already run
  puller_.pull_error.clear();
  clock_.advance(seconds(1));
  settle();
  EXPECT_EQ(puller_.pulls, 3);
  EXPECT_EQ(pp.status("ns/rev-1", kTag).ready_at, ready_at);
}

TEST_F(PrePullerTest, ReleaseStopsRetriesAndForgetsTheImage) {
  PrePuller& pp = make();
  puller_.pull_error[kD1] = unavailable("reg.example:5000: connection refused");
  pp.status("ns/rev-1", kTag);
  settle();
  ASSERT_EQ(puller_.pulls, 1);
  pp.release("ns/rev-1");
  pp.release("ns/rev-1");  // idempotent
  clock_.advance(seconds(100));
  settle();
  EXPECT_EQ(puller_.pulls, 1);
  EXPECT_FALSE(pp.nextDue().has_value());
  EXPECT_TRUE(pp.imagesInUse().empty());
}

TEST_F(PrePullerTest, RealThreadsPullInTheBackground) {
  // The production executor (own pool + loop thread) on the real clock.
  PrePullerOptions o;
  o.loop_interval = milliseconds(5);
  puller_.now_fn = [] { return RealTimeSource::instance().now(); };
  PrePuller pp(
      puller_, [this](const std::string& ref) { return puller_.isPresent(ref); }, RealTimeSource::instance(),
      o);
  std::mutex mu;
  std::condition_variable cv;
  int notes = 0;
  pp.setOnChange([&](const std::string&) {
    std::lock_guard<std::mutex> l(mu);
    ++notes;
    cv.notify_all();
  });
  pp.start();
  pp.status("ns/rev-1", kTag);
  std::unique_lock<std::mutex> l(mu);
  ASSERT_TRUE(
      cv.wait_for(l, seconds(10), [&] { return pp.status("ns/rev-1", kTag).phase == ImagePhase::kReady; }));
  l.unlock();
  pp.stop();
  EXPECT_EQ(puller_.pulls, 1);
}

}  // namespace
}  // namespace knap::images
