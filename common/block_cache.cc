#include "common/block_cache.h"

#include <malloc.h>

#include <cstdint>
#include <cstdlib>

namespace knap::block_cache {

namespace {

// Class c holds blocks of c * kClassBytes (usable size at least that).
constexpr int kMinClass = static_cast<int>((kMinCached + kClassBytes - 1) / kClassBytes);  // 3
constexpr int kMaxClass = static_cast<int>(kMaxCached / kClassBytes);                      // 32

struct FreeBlock {
  FreeBlock* next;
};

// Trivially constructible and destructible, so a thread_local of it needs
// no guard on access; the exit hook below is registered on first use.
struct ThreadCache {
  FreeBlock* head[kMaxClass + 1];
  uint8_t count[kMaxClass + 1];
  size_t bytes;
  bool hooked;  // the exit hook is registered
  bool closed;  // the thread is exiting: no more caching
};

thread_local ThreadCache t_cache;

void freeAll(ThreadCache& c) {
  for (int k = kMinClass; k <= kMaxClass; ++k) {
    while (FreeBlock* b = c.head[k]) {
      c.head[k] = b->next;
      std::free(b);
    }
    c.count[k] = 0;
  }
  c.bytes = 0;
}

struct ExitHook {
  ~ExitHook() {
    t_cache.closed = true;
    freeAll(t_cache);
  }
};

void hook(ThreadCache& c) {
  c.hooked = true;
  // (A thread_local with a destructor: registered with the C++ runtime the
  // first time this line runs on a thread, destroyed when the thread exits.)
  static thread_local ExitHook exit_hook;
  (void)exit_hook;
}

// The class for a request of `size` bytes (rounded up), 0 when not cached.
inline int classFor(size_t size) {
  if (size < kMinCached || size > kMaxCached) return 0;
  return static_cast<int>((size + kClassBytes - 1) / kClassBytes);
}

// Keeps `p`, a block of at least k * kClassBytes usable bytes, if there is
// room; otherwise frees it.
inline void keepOrFree(void* p, int k) {
  ThreadCache& c = t_cache;
  const size_t block = static_cast<size_t>(k) * kClassBytes;
  if (c.closed || c.count[k] >= kBlocksPerClass || c.bytes + block > kMaxThreadBytes) {
    std::free(p);
    return;
  }
  if (!c.hooked) hook(c);
  FreeBlock* b = static_cast<FreeBlock*>(p);
  b->next = c.head[k];
  c.head[k] = b;
  ++c.count[k];
  c.bytes += block;
}

}  // namespace

void* allocate(size_t size) {
  const int k = classFor(size);
  if (k == 0) return std::malloc(size == 0 ? 1 : size);
  ThreadCache& c = t_cache;
  if (FreeBlock* b = c.head[k]) {
    c.head[k] = b->next;
    --c.count[k];
    c.bytes -= static_cast<size_t>(k) * kClassBytes;
    return b;
  }
  return std::malloc(static_cast<size_t>(k) * kClassBytes);
}

void deallocateSized(void* p, size_t size) {
  if (p == nullptr) return;
  const int k = classFor(size);
  if (k == 0) {
    std::free(p);
    return;
  }
  keepOrFree(p, k);
}

void deallocate(void* p) {
  if (p == nullptr) return;
  // The largest class the block can serve. A block from allocate() of class
  // k has k * kClassBytes usable bytes plus malloc's rounding (< 512), so
  // it lands in class k again; anything smaller or larger is freed.
  const size_t usable = malloc_usable_size(p);
  const size_t k = usable / kClassBytes;
  if (usable < kMinCached || k < static_cast<size_t>(kMinClass) || k > static_cast<size_t>(kMaxClass)) {
    std::free(p);
    return;
  }
  keepOrFree(p, static_cast<int>(k));
}

size_t cachedBytes() {
  return t_cache.bytes;
}

size_t cachedBlocks() {
  size_t n = 0;
  for (int k = kMinClass; k <= kMaxClass; ++k) n += t_cache.count[k];
  return n;
}

void trim() {
  freeAll(t_cache);
}

}  // namespace knap::block_cache
