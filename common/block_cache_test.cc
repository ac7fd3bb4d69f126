#include "common/block_cache.h"

#include <gtest/gtest.h>
#include <malloc.h>

#include <cstring>
#include <thread>
#include <vector>

namespace knap::block_cache {
namespace {

class BlockCacheTest : public ::testing::Test {
 protected:
  void SetUp() override { trim(); }
  void TearDown() override { trim(); }
};

TEST_F(BlockCacheTest, MidSizedBlockIsReusedBySameClass) {
  void* a = allocate(2000);
  ASSERT_NE(a, nullptr);
  EXPECT_GE(malloc_usable_size(a), 2048u);  // rounded up to its class
  std::memset(a, 0xab, 2000);
  deallocateSized(a, 2000);
  EXPECT_EQ(cachedBlocks(), 1u);
  EXPECT_EQ(cachedBytes(), 2048u);
  void* b = allocate(1600);  // another size of the same 512 B class
  EXPECT_EQ(b, a);
  EXPECT_EQ(cachedBlocks(), 0u);
  EXPECT_EQ(cachedBytes(), 0u);
  void* c = allocate(2049);  // the next class: not this block
  EXPECT_NE(c, a);
  deallocateSized(b, 1600);
  deallocateSized(c, 2049);
  EXPECT_EQ(cachedBlocks(), 2u);
}

TEST_F(BlockCacheTest, SizesOutsideTheRangeAreNotCached) {
  for (size_t size : {size_t{0}, size_t{1}, size_t{64}, size_t{1032}, kMaxCached + 1, size_t{1} << 20}) {
    void* p = allocate(size);
    ASSERT_NE(p, nullptr) << size;
    deallocateSized(p, size);
  }
  for (size_t size : {size_t{0}, size_t{64}, size_t{1032}, size_t{1} << 20}) {
    deallocate(allocate(size));
  }
  EXPECT_EQ(cachedBlocks(), 0u);
  EXPECT_EQ(cachedBytes(), 0u);
  deallocate(nullptr);
  deallocateSized(nullptr, 4096);
}

TEST_F(BlockCacheTest, EdgesOfTheRangeAreCached) {
  void* lo = allocate(kMinCached);
  void* hi = allocate(kMaxCached);
  deallocateSized(lo, kMinCached);
  deallocateSized(hi, kMaxCached);
  EXPECT_EQ(cachedBlocks(), 2u);
  EXPECT_EQ(cachedBytes(), 1536u + kMaxCached);
  EXPECT_EQ(allocate(kMaxCached), hi);
  EXPECT_EQ(allocate(kMinCached), lo);
  deallocate(lo);
  deallocate(hi);
}

TEST_F(BlockCacheTest, UnsizedFreeFindsTheClassFromTheBlock) {
  void* a = allocate(3000);  // class 6 (3,072 B)
  deallocate(a);
  EXPECT_EQ(cachedBytes(), 3072u);
  EXPECT_EQ(allocate(2600), a);
  deallocate(a);
  // A block straight from malloc: cached by what it can hold, never a
  // class larger than its usable size.
  void* m = std::malloc(1800);
  const size_t usable = malloc_usable_size(m);
  deallocate(m);
  if (usable >= 1536) {
    EXPECT_EQ(allocate(1536), m);
    deallocate(m);
  }
  void* small = std::malloc(1040);  // usable < 1,536: freed, not kept
  trim();
  deallocate(small);
  EXPECT_EQ(cachedBlocks(), 0u);
  void* big = std::malloc(40000);
  deallocate(big);
  EXPECT_EQ(cachedBlocks(), 0u);
}

TEST_F(BlockCacheTest, PerClassAndPerThreadBoundsHold) {
  std::vector<void*> blocks;
  for (int i = 0; i < 3 * kBlocksPerClass; ++i) blocks.push_back(allocate(4000));
  for (void* p : blocks) deallocateSized(p, 4000);
  EXPECT_EQ(cachedBlocks(), static_cast<size_t>(kBlocksPerClass));
  blocks.clear();
  trim();
  // 16 KiB blocks: the byte bound comes first (128 KiB = 8 blocks; with
  // some other class cached the bound is reached earlier).
  void* other = allocate(8000);
  for (int i = 0; i < kBlocksPerClass; ++i) blocks.push_back(allocate(kMaxCached));
  deallocateSized(other, 8000);
  for (void* p : blocks) deallocateSized(p, kMaxCached);
  EXPECT_LE(cachedBytes(), kMaxThreadBytes);
  EXPECT_EQ(cachedBlocks(), 1u + (kMaxThreadBytes - 8192) / kMaxCached);
}

TEST_F(BlockCacheTest, EachThreadHasItsOwnCacheFreedWhenItExits) {
  void* mine = allocate(5000);
  deallocateSized(mine, 5000);
  size_t seen_in_thread = 0;
  void* theirs = nullptr;
  std::thread t([&] {
    theirs = allocate(5000);  // not this thread's cached block
    deallocateSized(theirs, 5000);
    seen_in_thread = cachedBlocks();
  });
  t.join();
  EXPECT_NE(theirs, mine);
  EXPECT_EQ(seen_in_thread, 1u);
  EXPECT_EQ(cachedBlocks(), 1u);
  // A block allocated by one thread and freed by another is kept by the
  // freeing thread.
  void* crossed = nullptr;
  std::thread a([&] { crossed = allocate(7000); });
  a.join();
  deallocateSized(crossed, 7000);
  EXPECT_EQ(cachedBlocks(), 2u);
  EXPECT_EQ(allocate(7000), crossed);
  deallocate(crossed);
}

}  // namespace
}  // namespace knap::block_cache
