// The program's operator new/delete are common/operator_new.cc's.
#include <gtest/gtest.h>

#include <cstdint>
#include <memory>
#include <new>
#include <string>
#include <thread>
#include <vector>

#include "common/block_cache.h"

namespace knap {
namespace {

TEST(OperatorNewTest, MidSizedAllocationsGoThroughTheCache) {
  block_cache::trim();
  auto* a = new char[3000];
  const auto a_addr = reinterpret_cast<uintptr_t>(a);
  delete[] a;
  EXPECT_EQ(block_cache::cachedBlocks(), 1u);
  auto* b = new char[2900];  // the same class: the same block
  EXPECT_EQ(reinterpret_cast<uintptr_t>(b), a_addr);
  delete[] b;
  {
    std::string s(5000, 'x');  // sized delete from the allocator
    std::vector<int> v(1500, 7);
    EXPECT_EQ(s.size(), 5000u);
    EXPECT_EQ(v[1499], 7);
  }
  EXPECT_EQ(block_cache::cachedBlocks(), 3u);
  auto small = std::make_unique<int>(1);
  EXPECT_EQ(*small, 1);
  block_cache::trim();
  EXPECT_EQ(block_cache::cachedBlocks(), 0u);
}

TEST(OperatorNewTest, ExhaustionThrowsBadAlloc) {
  bool threw = false;
  try {
    std::vector<char> huge;
    huge.reserve(static_cast<size_t>(1) << 62);
  } catch (const std::bad_alloc&) {
    threw = true;
  } catch (const std::length_error&) {
    threw = true;  // (libstdc++ may refuse before allocating)
  }
  EXPECT_TRUE(threw);
  void* p = ::operator new(static_cast<size_t>(1) << 62, std::nothrow);
  EXPECT_EQ(p, nullptr);
}

TEST(OperatorNewTest, ThreadsAllocateAndFreeAcrossEachOther) {
  // Blocks made on one thread and freed on another, many times over.
  std::vector<std::thread> threads;
  std::vector<std::vector<std::string>> made(4);
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 2000; ++i)
        made[t].emplace_back(1033 + (i * 97) % 15000, static_cast<char>('a' + t));
    });
  }
  for (auto& th : threads) th.join();
  threads.clear();
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      auto& mine = made[(t + 1) % 4];
      for (const std::string& s : mine) ASSERT_EQ(s.front(), static_cast<char>('a' + (t + 1) % 4));
      mine.clear();
      mine.shrink_to_fit();
    });
  }
  for (auto& th : threads) th.join();
}

}  // namespace
}  // namespace knap
