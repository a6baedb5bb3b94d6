#pragma once
// What the CPU ops' drivers (forward.cpp, input_grad.cpp, weight_grad.cpp)
// share: how an op's work is split into bands and tasks for the threads, the
// scratch memory the tasks keep, the micro-kernels' blockings and tiles, and
// the pages of large outputs.

#include "../conv11s4.h"
#include "kernels.h"
#include "packing.h"

#include <ATen/Parallel.h>
#include <ATen/core/Tensor.h>
#include <c10/util/irange.h>

#if defined(__linux__)
#include <sys/mman.h>
#endif

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>

namespace alexop::cpu {

constexpr int64_t kTaps = kKernelSize * kKernelSize;

inline int64_t ceil_div(int64_t a, int64_t b) {
  return (a + b - 1) / b;
}

template <typename T>
Strided<T> strided(const at::Tensor& t, int64_t n) {
  return {t.const_data_ptr<T>() + n * t.stride(0), t.stride(0), t.stride(1),
          t.stride(2), t.stride(3)};
}

// An extent of rows split into `count` bands whose sizes differ by at most one.
struct Bands {
  int64_t extent, count;
  int64_t begin(int64_t b) const { return b * extent / count; }
  int64_t max_rows() const { return ceil_div(extent, count); }
};

// Bands of at most max_rows rows, and enough of them for every thread to get
// several over the batch, so the last ones balance the load.
inline Bands bands(int64_t extent, int64_t images, int64_t max_rows) {
  const int64_t wanted = ceil_div(8 * at::get_num_threads(), images);
  return {extent, std::clamp<int64_t>(
                      std::max(ceil_div(extent, max_rows), wanted), 1, extent)};
}

// The blocking that computes nvec vectors of output channels in the least
// time: the fewest vectors, padding included, each at its blocking's cost
// (the first listed among equals).
template <typename Tiles>
const Tiles& blocking(const Tiles* sets, int nsets, int64_t nvec) {
  const auto cost = [&](int i) { return ceil_div(nvec, sets[i].kv) * sets[i].kv * sets[i].cost; };
  int best = 0;
  for (const auto i : c10::irange(1, nsets)) {
    if (cost(i) < cost(best)) {
      best = i;
    }
  }
  return sets[best];
}

// Calls run(fn, offsets, first pixel, pixels) for tiles covering pixels
// [0, count) of a band `width` pixels wide exactly; offsets[m] places pixel
// (p, q) of the tile at p * row_step + q * step.
template <typename T, typename Run>
void for_each_tile(const cpu::RowConvTiles<T>& tiles, int64_t count,
                   int64_t width, int64_t row_step, int64_t step,
                   const Run& run) {
  int64_t offsets[cpu::kMaxTilePixels];
  for (int64_t first = 0; first < count;) {
    int i = 0;
    while (tiles.m[i] > count - first) {
      ++i;
    }
    int64_t p = first / width, q = first % width;
    for (const auto m : c10::irange(tiles.m[i])) {
      offsets[m] = p * row_step + q * step;
      if (++q == width) {
        q = 0;
        ++p;
      }
    }
    run(tiles.fn[i], offsets, first, tiles.m[i]);
    first += tiles.m[i];
  }
}

// Calls pack(k0, k1) over filters [0, blocks * B) on all threads, packing
// rows of B filters: split at whole cache lines of a row where B fills
// them, else at whole blocks (AVX2's 24 filters), so that no two threads
// write one line.
template <typename T, typename Pack>
void parallel_filters(int64_t blocks, int64_t B, const Pack& pack) {
  constexpr int64_t line = 64 / sizeof(T);
  const int64_t unit = B % line == 0 ? line : B;
  at::parallel_for(0, blocks * B / unit, 1, [&](int64_t u0, int64_t u1) { pack(u0 * unit, u1 * unit); });
}

// The values of one tile's transformed input in the Winograd kernels (16
// phase channels of C, 4 x 4 products each, per xi), a cache line more
// where that is a multiple of 1 KB (4, 8, 12, 16 channels): the products
// read across tiles, and at 4 KB (16 channels) every tile fell in one L1
// set.
template <typename T>
int64_t winograd_tile_values(int64_t C) {
  const int64_t values = C * 64;
  return values * (int64_t)sizeof(T) % 1024 == 0 ? values + 64 / (int64_t)sizeof(T) : values;
}

// Scratch memory kept by each thread from call to call: allocating it per
// call made the allocator grow and trim its heap each time, and every page
// fault again. A call's own buffers (kCall: packed weights, partial sums,
// shared by the tasks) and a task's (kTask) are kept apart, since the
// calling thread runs tasks too. Sizes past kKeptScratch are allocated for
// the call only.
constexpr size_t kKeptScratch = size_t{32} << 20;

enum class Use { kCall, kTask };

class Scratch {
 public:
  Scratch(size_t bytes, Use use) {
    thread_local std::unique_ptr<std::byte[]> kept[2];
    thread_local size_t kept_bytes[2] = {0, 0};
    const int slot = static_cast<int>(use);
    if (bytes > kKeptScratch) {
      own_ = std::unique_ptr<std::byte[]>(new std::byte[bytes]);
      data_ = own_.get();
      return;
    }
    if (bytes > kept_bytes[slot]) {
      kept[slot] = std::unique_ptr<std::byte[]>(new std::byte[bytes]);
      kept_bytes[slot] = bytes;
    }
    data_ = kept[slot].get();
  }
  template <typename T>
  T* as() const {
    return reinterpret_cast<T*>(data_);
  }

 private:
  std::unique_ptr<std::byte[]> own_;
  std::byte* data_;
};

// Calls body(scratch, item) for every item in [0, count) on all threads,
// each thread taking the next item when it is done: on a machine shared with
// other processes a descheduled thread delays only its current item, not a
// fixed share. Each thread has `scratch_size` elements of scratch.
template <typename T, typename Body>
void parallel_items(int64_t count, int64_t scratch_size, const Body& body) {
  std::atomic<int64_t> next{0};
  const int64_t threads = std::min<int64_t>(count, at::get_num_threads());
  at::parallel_for(0, threads, 1, [&](int64_t, int64_t) {
    const Scratch scratch(scratch_size * sizeof(T), Use::kTask);
    for (int64_t item = next++; item < count; item = next++) {
      body(scratch.as<T>(), item);
    }
  });
}

// An output of more than 32 MB is memory glibc maps afresh every call, and
// the tasks fault it in 4 KB at a time (two threads then contend in the
// kernel's page allocator); asking for transparent huge pages makes that a
// few 2 MB faults. A hint: where it fails, or the pages are already there,
// nothing changes.
inline void advise_huge_pages(const at::Tensor& t) {
#if defined(__linux__) && defined(MADV_HUGEPAGE)
  constexpr uintptr_t kHuge = uintptr_t{2} << 20;
  const auto start = reinterpret_cast<uintptr_t>(t.data_ptr());
  const uintptr_t begin = (start + kHuge - 1) & ~(kHuge - 1);
  const uintptr_t end = (start + t.nbytes()) & ~(kHuge - 1);
  if (end > begin) {
    madvise(reinterpret_cast<void*>(begin), end - begin, MADV_HUGEPAGE);
  }
#else
  (void)t;
#endif
}

}  // namespace alexop::cpu
