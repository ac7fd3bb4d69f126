// The global operator new/delete through common/block_cache.h. Compiled into
// the executables that use meson's allocator_dep (knapd, the router
// benchmarks), not into a library: a replacement operator new must be
// defined once in the program.
//
// The array, nothrow and sized forms of libstdc++ call these. The aligned
// forms stay libstdc++'s (aligned_alloc and free, never cached).
#include <new>

#include "common/block_cache.h"

namespace {

void* allocateOrThrow(std::size_t size) {
  for (;;) {
    if (void* p = knap::block_cache::allocate(size)) return p;
    std::new_handler handler = std::get_new_handler();
    if (handler == nullptr) throw std::bad_alloc();
    handler();
  }
}

}  // namespace

void* operator new(std::size_t size) {
  return allocateOrThrow(size);
}

void* operator new[](std::size_t size) {
  return allocateOrThrow(size);
}

void operator delete(void* p) noexcept {
  knap::block_cache::deallocate(p);
}

void operator delete[](void* p) noexcept {
  knap::block_cache::deallocate(p);
}

void operator delete(void* p, std::size_t size) noexcept {
  knap::block_cache::deallocateSized(p, size);
}

void operator delete[](void* p, std::size_t size) noexcept {
  knap::block_cache::deallocateSized(p, size);
}
