#include "images/image_gc.h"

#include <gtest/gtest.h>

#include <map>

namespace knap::images {
namespace {

using std::chrono::hours;
using std::chrono::minutes;
using std::chrono::seconds;

// Image records over a content store: a target's bytes are freed when no
// record points at it any more (containerd's GC after a sync delete).
class FakeInventory : public ImageInventory {
 public:
  StatusOr<std::vector<StoredImage>> list() override {
    if (list_error) return *list_error;
    std::vector<StoredImage> out;
    for (const auto& [name, i] : images) out.push_back(i);
    return out;
  }
  Status remove(const std::string& name) override {
    removed.push_back(name);
    if (images.erase(name) == 0) return notFound("image " + name);
    return Status::ok();
  }
  uint64_t usedBytes() const {
    std::set<std::string> targets;
    for (const auto& [name, i] : images) targets.insert(i.target_digest);
    uint64_t sum = 0;
    for (const std::string& t : targets) sum += sizes.at(t);
    return sum;
  }
  void add(const std::string& name, const std::string& target, uint64_t size, WallTime created) {
    images[name] = StoredImage{name, target, created, created};
    sizes[target] = size;
  }

  std::map<std::string, StoredImage> images;
  std::map<std::string, uint64_t> sizes;
  std::vector<std::string> removed;
  std::optional<Status> list_error;
};

class ImageGcTest : public ::testing::Test {
 protected:
  ImageGc& make(ImageGcOptions o = {}) {
    o.high_percent = 85;
    o.low_percent = 80;
    o.min_age = hours(1);
    o.interval = minutes(5);
    gc_ = std::make_unique<ImageGc>(
        inv_,
        [this]() -> StatusOr<DiskUsage> {
          return DiskUsage{100, base_ + inv_.usedBytes()};
        },
        [this] { return in_use_; }, clock_, o);
    return *gc_;
  }

  SimulatedTimeSource clock_;
  FakeInventory inv_;
  uint64_t base_ = 50;  // bytes used by other things on the disk
  std::set<std::string> in_use_;
  std::unique_ptr<ImageGc> gc_;
};

TEST(GcCandidates, InUseByNameDigestRefOrSameTargetAreKept) {
  WallTime t0 = std::chrono::system_clock::from_time_t(1767225600);
  std::vector<StoredImage> images = {
      {"r/app:v1", "sha256:idx1", t0, t0},                           // same target as an in-use digest ref
      {"r/app@sha256:idx1", "sha256:idx1", t0, t0},                  // in use by name
      {"r/app@sha256:man1", "sha256:man1", t0, t0},                  // alias named by an in-use digest
      {"r/old:v0", "sha256:old", t0, t0},                            // unused
      {"r/older:v0", "sha256:older", t0 - hours(5), t0 - hours(5)},  // unused, older
      {"r/new:v0", "sha256:new", t0 + hours(2), t0 + hours(2)},      // unused, too young
  };
  std::set<std::string> in_use = {"r/app@sha256:idx1", "other@sha256:man1"};
  auto c = gcCandidates(images, in_use, {}, t0 + hours(2), hours(1));
  ASSERT_EQ(c.size(), 2u);
  EXPECT_EQ(c[0].name, "r/older:v0");
  EXPECT_EQ(c[1].name, "r/old:v0");
}

TEST(GcCandidates, LastUseCountsAsAge) {
  WallTime t0 = std::chrono::system_clock::from_time_t(1767225600);
  std::vector<StoredImage> images = {{"a", "sha256:a", t0, t0}, {"b", "sha256:b", t0, t0}};
  std::map<std::string, WallTime> last_used = {{"a", t0 + hours(3)}};
  auto c = gcCandidates(images, {}, last_used, t0 + hours(3) + minutes(30), hours(1));
  ASSERT_EQ(c.size(), 1u);
  EXPECT_EQ(c[0].name, "b");
  c = gcCandidates(images, {}, last_used, t0 + hours(5), hours(1));
  ASSERT_EQ(c.size(), 2u);
  EXPECT_EQ(c[0].name, "b");  // used longer ago
}

TEST_F(ImageGcTest, BelowTheHighThresholdNothingIsDeleted) {
  WallTime old = clock_.now() - hours(10);
  inv_.add("r/a:v1", "sha256:a", 30, old);  // 80% used
  ImageGc& gc = make();
  auto pass = gc.runOnce();
  ASSERT_TRUE(pass.isOk());
  EXPECT_FALSE(pass->collected);
  EXPECT_DOUBLE_EQ(pass->percent_before, 80);
  EXPECT_TRUE(inv_.removed.empty());
}

TEST_F(ImageGcTest, AboveTheHighThresholdOldestUnusedGoUntilBelowTheLowOne) {
  WallTime now = clock_.now();
  base_ = 40;
  inv_.add("r/used:v1", "sha256:used", 20, now - hours(20));  // oldest, but in use
  inv_.add("r/a:v1", "sha256:a", 10, now - hours(10));
  inv_.add("r/b:v1", "sha256:b", 10, now - hours(9));
  inv_.add("r/c:v1", "sha256:c", 10, now - hours(8));
  inv_.add("r/young:v1", "sha256:y", 5, now - minutes(10));  // 95% used
  in_use_ = {"r/used:v1"};
  ImageGc& gc = make();
  auto pass = gc.runOnce();
  ASSERT_TRUE(pass.isOk()) << pass.status().toString();
  EXPECT_TRUE(pass->collected);
  EXPECT_DOUBLE_EQ(pass->percent_before, 95);
  EXPECT_EQ(pass->removed, (std::vector<std::string>{"r/a:v1", "r/b:v1"}));
  EXPECT_DOUBLE_EQ(pass->percent_after, 75);
  EXPECT_TRUE(inv_.images.count("r/used:v1"));
  EXPECT_TRUE(inv_.images.count("r/c:v1"));
}

TEST_F(ImageGcTest, InUseAndPrePullImagesAreNeverDeletedEvenWhenTheDiskStaysFull) {
  WallTime old = clock_.now() - hours(10);
  base_ = 60;
  inv_.add("r/live@sha256:l", "sha256:l", 15, old);
  inv_.add("r/live:v1", "sha256:l", 15, old);  // its tag: same target
  inv_.add("r/keep:v1", "sha256:k", 15, old);
  inv_.add("r/unused:v1", "sha256:u", 5, old);  // 95%
  in_use_ = {"r/live:v1", "r/live@sha256:l"};
  ImageGcOptions o;
  o.keep = {"r/keep:v1"};
  ImageGc& gc = make(o);
  auto pass = gc.runOnce();
  ASSERT_TRUE(pass.isOk());
  EXPECT_EQ(pass->removed, (std::vector<std::string>{"r/unused:v1"}));
  EXPECT_DOUBLE_EQ(pass->percent_after, 90);
  EXPECT_EQ(inv_.images.size(), 3u);
}

TEST_F(ImageGcTest, AnImageJustReleasedIsKeptForTheMinimumAge) {
  WallTime old = clock_.now() - hours(10);
  base_ = 50;
  inv_.add("r/a:v1", "sha256:a", 40, old);  // 90%
  in_use_ = {"r/a:v1"};
  ImageGc& gc = make();
  ASSERT_TRUE(gc.runOnce().isOk());
  EXPECT_TRUE(inv_.removed.empty());
  in_use_.clear();  // its Revision was deleted
  clock_.advance(minutes(30));
  ASSERT_TRUE(gc.runOnce().isOk());
  EXPECT_TRUE(inv_.removed.empty()) << "last used 30 minutes ago";
  clock_.advance(minutes(31));
  ASSERT_TRUE(gc.runOnce().isOk());
  EXPECT_EQ(inv_.removed, (std::vector<std::string>{"r/a:v1"}));
}

TEST_F(ImageGcTest, TickRunsOncePerInterval) {
  base_ = 90;
  inv_.add("r/a:v1", "sha256:a", 5, clock_.now() - hours(2));
  ImageGc& gc = make();
  inv_.list_error = unavailable("containerd down");
  gc.tick();  // never ran: runs (and fails to list: nothing deleted)
  EXPECT_TRUE(inv_.removed.empty());
  inv_.list_error.reset();
  clock_.advance(minutes(4));
  gc.tick();
  EXPECT_TRUE(inv_.removed.empty()) << "ran before the interval";
  clock_.advance(minutes(1));
  gc.tick();
  EXPECT_EQ(inv_.removed, (std::vector<std::string>{"r/a:v1"}));
}

TEST(DiskUsage, StatvfsOfARealPath) {
  auto d = diskUsageOf("/");
  ASSERT_TRUE(d.isOk()) << d.status().toString();
  EXPECT_GT(d->total_bytes, 0u);
  EXPECT_LE(d->used_bytes, d->total_bytes);
  EXPECT_EQ(diskUsageOf("/no/such/dir").status().code(), Code::kNotFound);
}

}  // namespace
}  // namespace knap::images
