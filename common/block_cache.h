// A per-thread cache of mid-sized heap blocks in front of glibc's malloc.
//
// glibc's per-thread cache (tcache) takes blocks up to 1,032 bytes; a
// larger block goes through malloc's locked bins, about 270 instructions to
// allocate and as many to free. The router's coroutine frames (Asio caches
// one frame of at most 1 KiB per thread) and its header buffers are mostly
// 1-16 KiB and are allocated and freed on every proxied request.
//
// Blocks of 1,033 B to 16 KiB are rounded up to a multiple of 512 B and, when
// freed, kept on the freeing thread's list for their size class, to be
// handed out again by that thread. The cache is bounded: at most
// kBlocksPerClass blocks per class and kMaxThreadBytes per thread; beyond
// that, and for every other size, the calls go straight to malloc/free. A
// thread's blocks are freed when it exits.
//
// knapd and the router benchmarks route the global operator new/delete here
// (common/operator_new.cc, meson's allocator_dep); tests call it directly.
#pragma once

#include <cstddef>

namespace knap::block_cache {

inline constexpr size_t kMinCached = 1033;  // glibc's tcache takes up to 1,032
inline constexpr size_t kMaxCached = 16384;
inline constexpr size_t kClassBytes = 512;
inline constexpr int kBlocksPerClass = 8;
inline constexpr size_t kMaxThreadBytes = 128 * 1024;

// malloc(size) for size 0 too; nullptr when out of memory.
void* allocate(size_t size);
// Frees a block from allocate(); `size` as asked there.
void deallocateSized(void* p, size_t size);
// Frees a block from allocate() (or from malloc) when the size is unknown.
void deallocate(void* p);

// The calling thread's cached bytes and blocks (for tests).
size_t cachedBytes();
size_t cachedBlocks();
// Frees the calling thread's cached blocks.
void trim();

}  // namespace knap::block_cache
