#pragma once
// How a forward kernel would tile a problem, computed on the host without
// launching anything: the selector asks whether a kernel fits (shared
// memory, tile counts), the launcher takes the same plan.

#include "../common/precision.h"
#include "select.h"

#include <cstddef>
#include <cstdint>

namespace alexop::cuda::forward {

// One instantiation of the gather kernels (mma.sync or wgmma).
struct GatherConfig {
  MathMode mode;
  int nt8;         // n8 tiles per CTA
  int nbuf;        // patch buffers
  bool gmma;       // the wgmma kernel
  int cps;         // CTAs per SM (wgmma)
  bool staged;     // store warpgroup (wgmma, 16-bit)
  int elem_bytes;  // 4 (float) or 2
};

// A gather or space-to-depth kernel's tiling: the launcher copies it into
// the kernel's Params (gather.cuh; fields a kernel does not use stay 0).
struct TilePlan {
  bool fits = false;
  int MT = 0, PW = 0, CS = 0, PADL = 0, shift = 0, wcopy = 0, vec = 0, words = 0;
  int cstr = 0, rstr = 0, sstr = 0, stage = 0, ls = 0, gs = 0;
  int tiles_per_img = 0, total_tiles = 0, groups = 1;
  int QB = 0, nqb = 1, tiles_blk = 0, MTL = 0;  // column blocks (gather.cuh's Params)
  size_t smem = 0;
  unsigned grid_x = 0;
};

// The gather kernels: the largest tile (MT pixels, from 256 down to 32; the
// wgmma kernels from less where full tiles leave SMs idle) of whole output
// rows whose patch fits the shared memory beside the resident weights;
// where none does, full tiles of column blocks (not the staged kernels,
// whose store warps write whole rows).
TilePlan plan_gather(const Problem& p, const GatherConfig& c);

// The space-to-depth kernel (256-pixel tiles, two patch buffers): no fit
// where the patch does not fit beside the weights and staged rows (at K = 96
// and padding 2 from about 250 to 290 pixels of width on).
TilePlan plan_s2d(const Problem& p, int nt8);

// The phase-plane kernel (planes.cuh) built for p.C (16-bit 4 channels:
// the 4-slot build; else 3): its fixed shared memory fits, a tile per SM or
// more, tile counts and an image's bytes in 32 bits.
bool planes_fit(const Problem& p, int nt8);

}  // namespace alexop::cuda::forward
