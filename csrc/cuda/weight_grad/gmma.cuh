#pragma once
// The weight gradient on wgmma (sm_90a): one kernel for fp32 (3xFP16, TF32)
// and bf16 / fp16.
//
// GEMM D[m][k] = sum_l A[m][l] * B[l][k]: m = im2col row (c, r, s) of the
// input window (363, + the ones row 363 that yields grad_bias, padded to
// 384 = 6 m64 blocks), k = output channel (N = K = 64 or 96), l = pixel. One
// CTA per SM, 3 warpgroups; warpgroup wg owns rows [128 wg, 128 wg + 128) as
// two m64 blocks (2 x K/2 fp32 accumulators per thread). Units (img, q-chunk,
// output row p) of 56 (TF32: 7 k8 steps) or 64 pixels (3xFP16, 16-bit: 4 k16
// steps), split-K over the SMs exactly like the mma.sync kernels (same
// workspace, same reduce).
//  - A (input window) from registers, gathered from the 16-row input ring in
//    shared memory that the mma.sync kernels use (fp32: the v2 patch, 16-bit:
//    the v3 patch), by the same kind of cp.async pipeline: the next row's 4
//    new input rows and its dy rows are copied while the tensor cores work.
//    The fragment of row m, pixel j is patch[off(m) + 4 j] (mma.sync A layout).
//  - B (dy) from shared memory through a descriptor: wgmma's canonical K-major
//    no-swizzle layout, per k step NT8 blocks of 8 channels x two 8 x 16-byte
//    core matrices (LBO 128 B, SBO 256 B). dy rows arrive by 16-byte copies
//    from the 16-byte boundary at or before their start (DyRow) and one pass
//    per warp shifts them into the core matrices, since the tensor cores
//    cannot shift. A channels_last dy (DYL) arrives as whole pixels, 16-byte
//    pieces of their channels staged pixel-major, and that pass reads them
//    transposed (TF32 has no MN-major B; one pass serves every mode).
//  - TF32: A rounded in registers, B rounded by that pass.
//  - 3xFP16 (the fp32-accurate mode; faster than 3xTF32 here, with half the
//    error): as in the forward, both operands are scaled by powers of two
//    and split into fp16 hi and lo parts, and three fp16 wgmmas per k16 step
//    (lo*hi, hi*lo, hi*hi) give the 22 bits of each operand at twice TF32's
//    rate. The scales are taken per run of rows (see the kernel). The input
//    rows are split in place in the ring once they arrive, each word
//    becoming its (hi, lo) fp16 pair, so the gather forms A's hi and lo
//    fragments by two byte permutes; that pass writes dy's hi and lo parts
//    to two B buffers. The registers are flushed (scaled back,
//    round-to-nearest reductions) into the CTA's partial every few units,
//    since the tensor cores' accumulation truncates.
// The kernel is bound by instruction issue and latency, not the tensor
// cores, so the steady state carries the dy row start and the input rows'
// bases from row to row instead of recomputing them in 64 bits, and re-lays
// dy out by word loads; 3xFP16, whose registers are full, recomputes them.
// Inputs: fp32 any strides (VEC: 16-byte copies of input rows where NCHW,
// W % 4 == 0 and aligned, else 4-byte copies); 16-bit NCHW with W even
// (VEC: 16-byte copies where W % 8 == 0 and aligned, else 4-byte pairs), of
// 3 channels or, VEC, fewer (a last input slice read in place: the rows of
// the channels past it staged as zeros, not copied in as zeros first; the
// 4-byte copies have no register left for the count); dy 16-byte aligned.

#include "../common/wgmma.cuh"
#include "ring.cuh"

namespace alexop::cuda::weight_grad::ring {

constexpr int kGThreads = 384;  // 3 warpgroups
constexpr int kSR = 68;         // fp32 staging row stride: 16 B mod 128, 8-row LDS.128 conflict-free

// Per element type and mode: the patch and unit geometry.
template <typename T, int MODE>
struct GmmaGeo {  // bf16 / fp16: the v3 patch
  using S = uint16_t;                 // shared-memory word of the patch
  static constexpr int kQC = kQC3, kPix = 16, kJW = kJW3, kRS = kRS3, kCS = kCS3, kOnes = kOnes3;
  static constexpr int kOnesLen = 4 * kQC3 + 16;
  static constexpr int kLD = kLDA3;   // staging row stride (elements)
};
template <>
struct GmmaGeo<float, kTf32> {  // TF32: the v2 patch
  using S = float;
  static constexpr int kQC = kQC2, kPix = 8, kJW = kJW2, kRS = kRS2, kCS = kCS2, kOnes = kOnes2;
  static constexpr int kOnesLen = 4 * kQC2;
  static constexpr int kLD = kSR;
};
// 3xFP16: the v2 ring with the 16-bit units (4 k16 steps, 64 pixels). Its
// 32-bit words hold an input element's fp16 hi (low half) and lo (high
// half) once the rows are split in place.
template <>
struct GmmaGeo<float, k3xFp16> {
  using S = float;
  static constexpr int kQC = kQC3, kPix = 16, kJW = 4 * kQC3 + 8, kRS = 280, kCS = kRing * kRS, kOnes = kC * kCS;
  static constexpr int kOnesLen = 4 * kQC3 + 16;
  static constexpr int kLD = kSR;
};
// The ones follow the ring; a row's 16-byte copies and a dy row's staged
// chunks fit their row strides.
template <typename T, int MODE>
constexpr bool gmma_geo_ok() {
  using G = GmmaGeo<T, MODE>;
  constexpr int epc = 16 / (int)sizeof(T);
  return G::kOnes == kC * G::kCS && (G::kJW + 2 * (epc - 1)) / epc * epc <= G::kRS &&
         (G::kQC / epc + 1) * epc <= G::kLD;
}
static_assert(gmma_geo_ok<float, kTf32>() && gmma_geo_ok<float, k3xFp16>() && gmma_geo_ok<at::Half, k16>() &&
                  gmma_geo_ok<at::BFloat16, k16>(),
              "wgmma weight-gradient geometry");
template <typename T, int MODE>
constexpr int gpatch_bytes() {
  using G = GmmaGeo<T, MODE>;
  return ((G::kOnes + G::kOnesLen) * (int)sizeof(T) + 127) / 128 * 128;  // ring + ones
}
template <typename T, int MODE, int NT8>  // staged dy rows [2][K]
constexpr int gstg_bytes() { return 2 * NT8 * 8 * GmmaGeo<T, MODE>::kLD * (int)sizeof(T); }
template <typename T, int MODE, int NT8>  // one canonical B
constexpr int gdy_bytes() { return GmmaGeo<T, MODE>::kQC / GmmaGeo<T, MODE>::kPix * NT8 * 256; }
// 3xFP16 keeps a lo-part copy of each B buffer, the warps' maxima of |x|
// and |dy| (kGThreads / 32 floats each) and 6 scale factors
template <typename T, int MODE, int NT8>
constexpr int gsmem_bytes() {
  return gpatch_bytes<T, MODE>() + gstg_bytes<T, MODE, NT8>() + (MODE == k3xFp16 ? 4 : 2) * gdy_bytes<T, MODE, NT8>() +
         (MODE == k3xFp16 ? (2 * kGThreads / 32 + 6) * 4 : 0);
}
static_assert(gstg_bytes<float, kTf32, 8>() % 128 == 0 && gstg_bytes<float, kTf32, 12>() % 128 == 0 &&
                  gstg_bytes<at::Half, k16, 8>() % 128 == 0 && gstg_bytes<at::Half, k16, 12>() % 128 == 0,
              "dy buffers 128-byte aligned");

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)  // used by the wgmma kernel only
// One dy row (channel n of unit (img, q-chunk qc, output row p)) staged for
// the wgmma weight gradient by 16-byte copies from the 16-byte boundary at or
// before the row start (sh elements earlier): lane (r7, kq) of a staging warp
// copies chunks kq + 4 i of its row; elements past qvalid are zero-filled.
// E is the element type, NCH the chunks per row.
template <typename E, int NCH>
struct DyRow {
  static constexpr int kEPC = 16 / (int)sizeof(E);  // elements per chunk
  const E* row;  // the 16-byte boundary at or before the row start
  uint32_t dst;  // the lane's first chunk in the staging row
  int rem;       // valid elements from the lane's first chunk on
  // start: the row's first element in dy; srow: its staging row (shared address)
  __device__ __forceinline__ DyRow(const E* dy, uint32_t srow, int64_t start, int kq, int qvalid) {
    const int sh = (int)(start & (kEPC - 1));
    row = dy + (start - sh);
    dst = srow + 16u * kq;
    rem = qvalid + sh - kEPC * kq;
  }
  __device__ __forceinline__ void copy(int kq, int i) const {
    if (4 * i + 3 < NCH || kq + 4 * i < NCH) {
      const int nv = min(max(rem - 4 * kEPC * i, 0), kEPC);
      // nothing read when nv == 0: point at the row's own (valid) start
      cp_async16n(dst + 64u * i, row + (nv ? kEPC * (kq + 4 * i) : 0), (int)sizeof(E) * nv);
    }
  }
};

#endif

// Stores (add = false) or adds the accumulators into the CTA's partial
// [K][kNW], then zeroes them. The adds are reductions (red.global.add.f32,
// round to nearest): the flush issues them and goes on, where loading the
// partial first had it wait on L2 (the partials of all slices outgrow what
// stays in L2 beside the streamed inputs). Each partial element belongs to
// one thread of one CTA, whose operations on one address take effect in
// program order, so every sum has a fixed order (deterministic). UNSCALE
// (3xFP16): the accumulators are scaled back first, by un[0] * un[1] (weight
// rows) or un[2] * un[3] (the bias row).
template <int NT8, bool UNSCALE>
__device__ __forceinline__ void gflush(float (&acc)[2][NT8 * 4], float* wsl, int mrow0, int t, bool add,
                                       const float* un) {
#pragma unroll
  for (int b = 0; b < 2; ++b)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int m = mrow0 + b * 64 + 8 * h;
      if (m < kNW) {
#pragma unroll
        for (int j = 0; j < NT8; ++j)
#pragma unroll
          for (int c = 0; c < 2; ++c) {
            float* p = wsl + (8 * j + 2 * t + c) * kNW + m;
            // two factors: their product may leave fp32's range
            float v = acc[b][4 * j + 2 * h + c];
            if constexpr (UNSCALE) v = m == kKred ? v * un[2] * un[3] : v * un[0] * un[1];
            if (add) {
              asm volatile("red.global.add.f32 [%0], %1;\n" ::"l"(p), "f"(v) : "memory");
            } else {
              *p = v;
            }
          }
      }
#pragma unroll
      for (int j = 0; j < NT8; ++j) acc[b][4 * j + 2 * h] = acc[b][4 * j + 2 * h + 1] = 0.f;
    }
}

// T = float (MODE kTf32 or k3xFp16) or bf16/fp16 (MODE k16). VEC: input
// rows by 16-byte copies (column j of a stage at j + sh, sh = -pad mod the
// elements per copy); else by 4-byte copies (fp32: one element, any strides;
// 16-bit: a pair, sh = pad & 1).
// DYL: dy channels_last, its pixels sdyP elements apart (a pixel's kdy
// channels 16-byte aligned).
template <typename T, int MODE, int NT8, bool VEC, bool DYL>
__global__ void __launch_bounds__(kGThreads, 1)
    wgrad_gmma_kernel(const T* __restrict__ dy, int64_t sdyN, int kdy, const T* __restrict__ x, int kx, int64_t sN,
                      int64_t sC, int64_t sH, int64_t sW, int K, int H, int W, int P, int Q, int pad, int nQc,
                      int64_t U, int S, float* __restrict__ ws, int sdyP) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  using G = GmmaGeo<T, MODE>;
  using E = typename G::S;
  constexpr bool F32 = std::is_same_v<T, float>;
  constexpr bool H3 = MODE == k3xFp16;
  using TA = std::conditional_t<H3, __half, std::conditional_t<F32, float, MmaType<T>>>;
  constexpr int QC = G::kQC, PIX = G::kPix, RS = G::kRS, CS = G::kCS;
  constexpr int EB = (int)sizeof(T);
  constexpr int EPC = 16 / EB;                    // elements per 16-byte copy
  constexpr int EPU = VEC ? EPC : 4 / EB;         // elements per input-row copy
  constexpr int NACC = NT8 * 4;
  constexpr int MH = NT8 * 8;                     // = K
  constexpr int STEPS = QC / PIX;
  constexpr int PB = gpatch_bytes<T, MODE>();
  constexpr int STG = gstg_bytes<T, MODE, NT8>();
  constexpr int DYB = gdy_bytes<T, MODE, NT8>();
  constexpr int STEPB = NT8 * 256;
  constexpr int NCHK = QC / EPC;                  // 16-byte chunks of a unit's dy row
  constexpr int NCH = NCHK + 1;                   // staged per dy row (it may start mid-chunk)
  constexpr int NPC = (G::kJW + 2 * (EPU - 1)) / EPU;  // copies per input row
  constexpr int NI = (NPC + 31) / 32;
  constexpr int NW = kGThreads / 32;
  // DYL: a unit's dy staged pixel-major, a pixel's MH channels a row (16
  // bytes to spare), in the space of the channel rows it replaces
  constexpr int LDS = MH + EPC;
  static_assert(QC * LDS <= MH * G::kLD && LDS * EB % 16 == 0, "channels_last dy staging");
  extern __shared__ __align__(128) uint32_t smgw[];
  const uint32_t sbase = smem_u32(smgw);
  const uint32_t* smw = smgw;
  E* sme = reinterpret_cast<E*>(smgw);
  unsigned char* smb = reinterpret_cast<unsigned char*>(smgw);
  const uint32_t stg0 = sbase + PB;         // staged dy rows [2][K][kLD]
  const uint32_t dyb0 = stg0 + STG;         // canonical B [2] (+ lo parts [2], 3xFP16)

  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const int g = lane >> 2, t = lane & 3;
  const int wg = warp >> 2, wq = warp & 3;
  const int slice = blockIdx.x;
  const int64_t u0 = U * slice / S, u1 = U * (slice + 1) / S;
  const int sh = (-pad) & (EPU - 1);

  E one;
  if constexpr (H3) one = __uint_as_float(0x3C00u);  // fp16 hi 1, lo 0
  else if constexpr (F32) one = 1.f;
  else one = std::is_same_v<T, at::BFloat16> ? 0x3F80 : 0x3C00;
  for (int i = tid; i < G::kOnesLen; i += kGThreads) sme[G::kOnes + i] = one;

  // 3xFP16 scales x by 2^tx and dy by 2^tdy. A run (the units from one full
  // staging to the next: one image's rows of one q-chunk, within the slice)
  // takes them from its first unit's largest finite magnitudes, which they
  // put in [2^13, 2^14): one binade below fp16_exp's, as later rows may be
  // larger. A later unit whose new values would reach 2^15 or fall below 2^6
  // starts a new run (ovf), so every unit's scaled values stay in fp16's
  // range. The accumulators are scaled back at each flush, and a run flushes
  // them before it changes the scales. scl, in shared memory as the
  // registers are all taken: x's and dy's scale, then the weight rows' and
  // the bias row's unscale, each as two normal factors (tx + tdy reaches
  // +-254). red: the block maxima.
  float* const red = reinterpret_cast<float*>(smb + PB + STG + 4 * DYB);
  float* const scl = red + 2 * kGThreads / 32;
  auto out_of_range = [](float m, float s) { return m > 0.f && !(m * s >= 64.f && m * s < 32768.f); };

  // Row-to-row state: a unit's dy row starts Q elements after the previous
  // output row's, and its new input rows share the image-and-channel base and
  // first column of the previous unit's, so the other modes carry these from
  // unit to unit instead of recomputing them in 64 bits. 3xFP16 holds twice
  // the A fragments and has no registers to spare: it recomputes them, and
  // its A rows' ring offsets too (carried, they spilled in 3xTF32).
  constexpr bool kCarry = !H3;
  // dy: warp w < NT8 stages rows n = 8w + r7 (see DyRow); images sdyN
  // apart, kdy channels (rows past them staged as zeros, their start that
  // of the last channel's row, which the copies do not read). DYL: every
  // thread copies 16-byte pieces of the unit's pixels (channels past kdy and
  // pixels past qvalid zero-filled), and the re-layout reads other warps'
  // copies: a barrier between (the NCHW rows are each one warp's).
  const bool dyw = DYL || warp < NT8;
  const int r7 = lane & 7, kq = lane >> 3;
  const int ndy = warp * 8 + r7;
  const bool dy_live = ndy < kdy;
  using Dy = DyRow<T, NCH>;
  // the next output row's dy from a unit's
  const int64_t dq = DYL ? (int64_t)Q * sdyP : Q;
  auto dy_start = [&](int64_t img, int qc, int p) {
    if constexpr (DYL) return img * sdyN + ((int64_t)p * Q + qc * QC) * sdyP;
    else return img * sdyN + ((int64_t)min(ndy, kdy - 1) * P + p) * Q + (int64_t)qc * QC;
  };
  auto copy_dy = [&](int64_t start, int buf, int qvalid) {
    if constexpr (DYL) {
      // piece ch of pixels j0 + JS i: ch the same for every i
      constexpr int CPP = MH / EPC, JS = kGThreads / CPP;
      static_assert(kGThreads % CPP == 0, "a thread's pieces of one channel range");
      const int j0 = tid / CPP, ch = tid - j0 * CPP;
      const int nc = min(max(kdy - EPC * ch, 0), EPC);
#pragma unroll
      for (int i = 0; i < (QC + JS - 1) / JS; ++i) {
        const int j = j0 + JS * i;
        const int nv = j < qvalid ? nc : 0;
        // nothing read when nv == 0: point at dy's (valid) start
        cp_async16n_if(stg0 + (uint32_t)(EB * ((buf * QC + j) * LDS + EPC * ch)),
                       dy + (nv ? start + (j * sdyP + EPC * ch) : 0), EB * nv, QC % JS == 0 || j < QC);
      }
    } else {
      const Dy d(dy, stg0 + (uint32_t)(EB * (buf * MH + ndy) * G::kLD), start, kq, dy_live ? qvalid : -QC - 16);
#pragma unroll
      for (int i = 0; i < (NCH + 3) / 4; ++i) d.copy(kq, i);
    }
  };
  // Input rows: one warp per row. x has nx channels (1 to 3; VEC only, where
  // the registers allow, else 3): the rows of those past them are staged as
  // zeros, their base that of the last channel, which the copies do not read.
  const int nx = VEC ? kx : kC;
  struct Row {
    const T* src;  // start of the (clamped, valid) image row
    int iwl;       // first column of the lane's copy
    uint32_t dst;
    bool ok;
  };
  // A row's image-and-channel base and the lane's first column depend only
  // on the image and q-chunk (row_of takes them as xc and iwl)
  auto row_base = [&](int64_t img, int c) { return x + img * sN + min(c, nx - 1) * sC; };
  auto first_col = [&](int qc) { return 4 * qc * QC - pad - sh + EPU * lane; };
  auto row_of = [&](const T* xc, int iwl, int p, int rb, int rr, int c) {
    Row r;
    const int ih = 4 * p - pad + rr;
    r.ok = ih >= 0 && ih < H && c < nx;
    const int slot = (rb + rr) & (kRing - 1);
    r.iwl = iwl;
    r.src = xc + (int64_t)(r.ok ? ih : 0) * sH;
    r.dst = sbase + (uint32_t)EB * (c * CS + slot * RS) + (VEC ? 16u : 4u) * lane;
    return r;
  };
  auto copy_row = [&](const Row& r, int i) {
    if (i < NI - 1 || lane + 32 * i < NPC) {
      const int col = r.iwl + 32 * EPU * i;
      // W % EPU == 0: a copy is all in or all out
      const bool ok = r.ok && (unsigned)col < (unsigned)W;
      if constexpr (VEC) {
        cp_async16n(r.dst + 512u * i, r.src + (ok ? col : 0), ok ? 16 : 0);
      } else if constexpr (F32) {
        cp_async4n(r.dst + 128u * i, r.src + (ok ? (int64_t)col * sW : 0), ok ? 4 : 0);
      } else {
        cp_async4n(r.dst + 128u * i, r.src + (ok ? col : 0), ok ? 4 : 0);
      }
    }
  };
  auto stage_rows = [&](int64_t img, int qc, int p, int rb) {
    for (int row = warp; row < kC * kR; row += kGThreads / 32) {
      const int c = row % kC;
      const Row r = row_of(row_base(img, c), first_col(qc), p, rb, row / kC, c);
#pragma unroll
      for (int i = 0; i < NI; ++i) copy_row(r, i);
    }
  };
  // The steady successor's 4 new rows x 3 channels: one per warp, row
  // 7 * kC + warp (window row srr, channel sc). Its image-and-channel base
  // and first column change only with the image or q-chunk (xs, siwl).
  static_assert(kGThreads / 32 == 4 * kC, "one new input row per warp");
  const int srr = 7 + warp / kC, sc = warp % kC;
  const T* xs = x;
  int siwl = 0;
  auto stage_next_row = [&](int64_t img, int qc, int p1, int rb1) {
    const Row r = row_of(kCarry ? xs : row_base(img, sc), kCarry ? siwl : first_col(qc), p1, rb1, srr, sc);
#pragma unroll
    for (int i = 0; i < NI; ++i) copy_row(r, i);
  };
  // 3xFP16, once they have arrived: the words this lane copied into ring
  // slot `slot` of channel c. row_max grows m by their finite magnitudes;
  // split_row scales and splits them in place (zero-filled ones stay zero)
  // and returns m grown by their magnitudes.
  auto own_words = [&](int c, int slot, auto&& f) {
    unsigned char* dst = smb + EB * (c * CS + slot * RS) + (VEC ? 16 : 4) * lane;
#pragma unroll
    for (int i = 0; i < NI; ++i)
      if (i < NI - 1 || lane + 32 * i < NPC) f(dst + (VEC ? 512 : 128) * i);
  };
  auto row_max = [&](float m, int c, int slot) {
    own_words(c, slot, [&](unsigned char* w) {
      if constexpr (VEC) {
        m = max_finite_abs4(m, *reinterpret_cast<const float4*>(w));
      } else {
        m = max_finite_abs(m, *reinterpret_cast<const float*>(w));
      }
    });
    return m;
  };
  auto split_row = [&](float m, int c, int slot) {
    const float sx = scl[0];
    own_words(c, slot, [&](unsigned char* w) {
      if constexpr (VEC) {
        const float4 u = *reinterpret_cast<const float4*>(w);
        m = max_abs4(m, u);
        *reinterpret_cast<uint4*>(w) = split_fp16_words(u, sx);
      } else {
        const float v = *reinterpret_cast<const float*>(w);
        uint32_t hi, lo;
        m = fmaxf(m, fabsf(v));
        split_fp16x2(sx * v, 0.f, hi, lo);
        *reinterpret_cast<uint32_t*>(w) = __byte_perm(hi, lo, 0x5410);
      }
    });
    return m;
  };

  // rows of this thread: mrow0 + 64 b + 8 h (im2col row m = (c, r, s), or ones)
  const int mrow0 = wg * 128 + wq * 16 + g;
  int rbase[2][2], rrow[2][2];
#pragma unroll
  for (int b = 0; b < 2; ++b)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const WindowColumn w = window_column(mrow0 + 64 * b + 8 * h, CS, sh, G::kOnes);
      rbase[b][h] = w.base + (PIX / 2) * t;
      rrow[b][h] = w.r;
    }

  // DYL re-layout: (channel group of 32, chunk c of EPC pixels) a warp's
  // task, lane l channel 32 g + l: 32 lanes read 32 adjacent channels of a
  // staged pixel (no bank conflicts) and write 4 core-matrix rows of 16
  // bytes. dyl_tasks calls f(n, c, chunk) for this lane's.
  // A warp's channel group is the same for all its tasks: chunks c0 + CST i.
  constexpr int NG = MH / 32, CST = NW / NG;
  static_assert(NW % NG == 0, "a warp's tasks of one channel group");
  auto dyl_tasks = [&](int buf, auto&& f) {
    // tid laundered, so that these values are formed here, not hoisted out
    // of the unit loop to be held (spilled) beside the accumulators
    int lt = tid;
    asm volatile("" : "+r"(lt));
    const int g = (lt >> 5) % NG, c0 = (lt >> 5) / NG, ln = lt & 31;
    const E* stg = reinterpret_cast<const E*>(smb + PB) + (buf * QC + EPC * c0) * LDS + 32 * g + ln;
#pragma unroll
    for (int i = 0; i < (NCHK + CST - 1) / CST; ++i) {
      const int c = c0 + CST * i;
      if (NCHK % CST == 0 || c < NCHK) {
        const E* e = stg + EPC * CST * i * LDS;
        uint4 v;
        if constexpr (F32) {
          v = make_uint4(__float_as_uint(e[0]), __float_as_uint(e[LDS]), __float_as_uint(e[2 * LDS]),
                         __float_as_uint(e[3 * LDS]));
        } else {
          uint32_t w[4];
#pragma unroll
          for (int k = 0; k < 4; ++k) w[k] = (uint32_t)e[2 * k * LDS] | ((uint32_t)e[(2 * k + 1) * LDS] << 16);
          v = make_uint4(w[0], w[1], w[2], w[3]);
        }
        f(32 * g + ln, c, v);
      }
    }
  };
  // 3xFP16's run start: the largest finite |dy| of this lane's staged chunks
  // (as relayout reads them)
  auto dy_max = [&](int64_t start, int buf) {
    float m = 0.f;
    if constexpr (DYL) {
      dyl_tasks(buf, [&](int, int, uint4 v) {
        m = max_finite_abs4(m, make_float4(__uint_as_float(v.x), __uint_as_float(v.y), __uint_as_float(v.z),
                                           __uint_as_float(v.w)));
      });
    } else if (dyw) {
      const float* roww = reinterpret_cast<const float*>(smb + PB + EB * (buf * MH + ndy) * G::kLD) +
                          (int)(start & (EPC - 1));
#pragma unroll
      for (int i = 0; i < (NCHK + 3) / 4; ++i)
        if (4 * i + 3 < NCHK || kq + 4 * i < NCHK)
#pragma unroll
          for (int k = 0; k < EPC; ++k) m = max_finite_abs(m, roww[EPC * (kq + 4 * i) + k]);
    }
    return m;
  };
  // Chunk c (EPC pixels) of channel n, v, into its core-matrix row (n's
  // group's core matrices at ngo, its row at nro within them), with the TF32
  // rounding (TF32) or scaled and split into fp16 hi and lo parts (3xFP16: a
  // chunk of 4 is half a core-matrix row). Returns m grown by the largest
  // |dy| it split (3xFP16).
  auto emit = [&](uint4 v, int c, int ngo, int nro, int buf, float m) {
    if constexpr (H3) {
      const int o = PB + STG + buf * DYB + (c >> 2) * STEPB + ngo + ((c >> 1) & 1) * 128 + nro + (c & 1) * 8;
      uint32_t h0, l0, h1, l1;
      const float sdy = scl[1];
      m = max_abs4(m, make_float4(__uint_as_float(v.x), __uint_as_float(v.y), __uint_as_float(v.z),
                                  __uint_as_float(v.w)));
      split_fp16x2(sdy * __uint_as_float(v.x), sdy * __uint_as_float(v.y), h0, l0);
      split_fp16x2(sdy * __uint_as_float(v.z), sdy * __uint_as_float(v.w), h1, l1);
      *reinterpret_cast<uint2*>(smb + o) = make_uint2(h0, h1);
      *reinterpret_cast<uint2*>(smb + o + 2 * DYB) = make_uint2(l0, l1);
    } else {
      const int o = PB + STG + buf * DYB + (c >> 1) * STEPB + ngo + (c & 1) * 128 + nro;
      if constexpr (MODE == kTf32) {
        v = make_uint4(round_tf32(v.x), round_tf32(v.y), round_tf32(v.z), round_tf32(v.w));
      }
      *reinterpret_cast<uint4*>(smb + o) = v;
    }
    return m;
  };
  // The staged dy of a unit -> canonical buffer buf. Returns the largest |dy|
  // it split (3xFP16; else 0).
  auto relayout = [&](int64_t start, int buf) {
    float m = 0.f;
    if constexpr (DYL) {
      dyl_tasks(buf, [&](int n, int c, uint4 v) { m = emit(v, c, (n >> 3) * 256, (n & 7) * 16, buf, m); });
    } else if (dyw) {
      // This warp's staged rows -> its channel group's core matrices. Lane
      // (r7, kq): chunks kq + 4 i.
      __syncwarp();
      // Chunk c is staged elements [EPC c + shd, + EPC): read as words from
      // word (EPC c + shd) * EB / 4 on (16-bit: one more, and a funnel shift
      // where shd is odd), which costs fewer instructions than selecting
      // among aligned 16-byte reads.
      const int shd = (int)(start & (EPC - 1));
      const uint32_t* roww = reinterpret_cast<const uint32_t*>(smb + PB + EB * (buf * MH + ndy) * G::kLD);
#pragma unroll
      for (int i = 0; i < (NCHK + 3) / 4; ++i) {
        const int c = kq + 4 * i;
        if (4 * i + 3 < NCHK || c < NCHK) {
          uint4 v;
          const uint32_t* w = roww + (EPC * c + shd) * EB / 4;
          if constexpr (F32) {
            v = make_uint4(w[0], w[1], w[2], w[3]);
          } else {
            const int f = (shd & 1) * 16;
            const uint32_t w4 = w[4];
            v = make_uint4(__funnelshift_r(w[0], w[1], f), __funnelshift_r(w[1], w[2], f),
                           __funnelshift_r(w[2], w[3], f), __funnelshift_r(w[3], w4, f));
          }
          m = emit(v, c, warp * 256, r7 * 16, buf, m);
        }
      }
    }
    return m;
  };

  float acc[2][NACC];
#pragma unroll
  for (int b = 0; b < 2; ++b)
#pragma unroll
    for (int i = 0; i < NACC; ++i) acc[b][i] = 0.f;

  // B descriptors of k step 0 for buffers 0 and 1
  const uint64_t draw_b0 = gmma_desc(dyb0), draw_b1 = gmma_desc(dyb0 + DYB);

  float* wsl = ws + (int64_t)slice * K * kNW;
  bool ws_written = false;
  // 3xFP16 flushes the registers into the partial every FLUSH units, as the
  // mma.sync kernel's 3xTF32 does: the tensor cores' fp32 accumulation
  // truncates. Flushes are staggered over the slices: fewer CTAs update their
  // partials at once.
  constexpr int FLUSH = H3 ? 8 : 0;
  int since_flush = FLUSH > 0 ? slice % FLUSH : 0;
  bool ovf = false;   // 3xFP16: unit u's values left the run's range
  int rb = 0;
  bool loaded = false;
  int64_t dstart = 0;  // this lane's dy row of unit u (kCarry)
  int p = (int)(u0 % P), qc = (int)((u0 / P) % nQc);
  int64_t img = u0 / P / nQc;
  for (int64_t u = u0; u < u1; ++u) {
    const int qvalid = min(QC, Q - qc * QC);
    const int nst = (qvalid + PIX - 1) / PIX;
    const int buf = (int)(u & 1);

    if (!loaded) {
      // not prefetched (first unit, a new image / q-chunk, or a new 3xFP16
      // run): all 11 rows
      __syncthreads();  // every warpgroup is done with unit u-1's rows
      dstart = dy_start(img, qc, p);
      xs = row_base(img, sc);
      siwl = first_col(qc);
      if (dyw) copy_dy(dstart, buf, qvalid);
      stage_rows(img, qc, p, rb);
      cp_async_commit();
      cp_async_wait_group<0>();
      if constexpr (DYL && !H3) __syncthreads();  // (3xFP16: block_max's barriers)
      if constexpr (H3) {  // the run's scales
        float mx = 0.f;
        for (int row = warp; row < kC * kR; row += kGThreads / 32)
          mx = row_max(mx, row % kC, (rb + row / kC) & (kRing - 1));
        mx = block_max<kGThreads>(mx, red);
        const float md = block_max<kGThreads>(dy_max(dstart, buf), red + kGThreads / 32);
        if (tid == 0) {  // scl's last readers (unit u-1's flush) are past block_max's barriers
          const int tx = max(fp16_exp(mx) - 1, -126), tdy = max(fp16_exp(md) - 1, -126);
          const int e = max(-(tx + tdy), -252);
          // an all-zero start gets scale 0, so that any value starts a new run
          scl[0] = mx > 0.f ? pow2f(tx) : 0.f;
          scl[1] = md > 0.f ? pow2f(tdy) : 0.f;
          scl[2] = pow2f(e / 2);
          scl[3] = pow2f(e - e / 2);
          scl[4] = pow2f(-tdy / 2);
          scl[5] = pow2f(-tdy - (-tdy / 2));
        }
        __syncthreads();
        for (int row = warp; row < kC * kR; row += kGThreads / 32)
          split_row(0.f, row % kC, (rb + row / kC) & (kRing - 1));
        ovf = false;
      }
      relayout(dstart, buf);
    }
    // (otherwise unit u was staged and re-laid out at the end of unit u-1)
    fence_proxy_async();  // st.shared data -> the tensor cores' async proxy
    // After this barrier every warpgroup is done with unit u-1: its buffers
    // and the ring rows that only it used may be overwritten by the prefetch.
    __syncthreads();

    const bool next = (u + 1 < u1) && (p + 1 < P);

    int aoff[2][2];
#pragma unroll
    for (int b = 0; b < 2; ++b)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        int base = rbase[b][h], row = rrow[b][h];
        if constexpr (!kCarry) {
          const WindowColumn w = window_column(mrow0 + 64 * b + 8 * h, CS, sh, G::kOnes);
          base = w.base + (PIX / 2) * t;
          row = w.r;
        }
        aoff[b][h] = row < 0 ? base : base + ((rb + row) & (kRing - 1)) * RS;
      }

    // A fragment of k step st: pixel columns PIX st + (t, t + PIX/2) (fp32: one
    // word each; 16-bit: pixel pairs 2t, 2t + 1 packed), rows g, g + 8
    uint32_t A[2][2][4], L[2][2][4];
    auto gather = [&](int st, uint32_t (&a)[2][4], uint32_t (&l)[2][4]) {
      const int o = 4 * PIX * st;
#pragma unroll
      for (int b = 0; b < 2; ++b) {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int base = aoff[b][e & 1] + o + (e >> 1) * 2 * PIX;
          if constexpr (H3) {  // the hi halves of two pixels' words, and the lo halves
            const uint32_t w0 = smw[base], w1 = smw[base + 4];
            a[b][e] = __byte_perm(w0, w1, 0x5410);
            l[b][e] = __byte_perm(w0, w1, 0x7632);
          } else if constexpr (F32) {
            a[b][e] = smw[base];
            if constexpr (MODE == kTf32) a[b][e] = round_tf32(a[b][e]);
          } else {
            a[b][e] = (uint32_t)sme[base] | ((uint32_t)sme[base + 4] << 16);
          }
        }
      }
    };
    // descriptors of k step 0; step st adds st * STEPB >> 4 to the address field (no carry: < 256 KB)
    const uint64_t draw0 = buf ? draw_b1 : draw_b0, dlo0 = gmma_desc(dyb0 + (2 + buf) * DYB);
    gather(0, A[0], L[0]);
#pragma unroll
    for (int st = 0; st < STEPS; ++st) {
      if (st < nst) {
        gmma_fence();
        const uint64_t dr = draw0 + (uint64_t)((st * STEPB) >> 4);
        if constexpr (H3) {  // lo * hi, hi * lo, then hi * hi
          const uint64_t dl = dlo0 + (uint64_t)((st * STEPB) >> 4);
#pragma unroll
          for (int b = 0; b < 2; ++b) gmma_rs<TA, NT8>(acc[b], L[st & 1][b], dr);
#pragma unroll
          for (int b = 0; b < 2; ++b) gmma_rs<TA, NT8>(acc[b], A[st & 1][b], dl);
        }
#pragma unroll
        for (int b = 0; b < 2; ++b) gmma_rs<TA, NT8>(acc[b], A[st & 1][b], dr);
        gmma_commit();
        if (st == 0 && next) {
          // prefetch the steady successor (next row: its dy rows, 4 new input
          // rows) while the tensor cores work
          if constexpr (!kCarry) dstart = dy_start(img, qc, p);
          if (dyw) copy_dy(dstart + dq, buf ^ 1, qvalid);
          stage_next_row(img, qc, p + 1, rb + 4);
          cp_async_commit();
        }
        if (st + 1 < nst) {
          gmma_wait<1>();
          gather(st + 1, A[(st + 1) & 1], L[(st + 1) & 1]);
        }
      }
    }
    if (next) {
      // the successor's dy rows -> canonical buffer buf ^ 1 (unit u-1's,
      // retired by every warpgroup before this unit's barrier) while this
      // unit's last wgmmas run
      cp_async_wait_group<0>();
      if constexpr (DYL) __syncthreads();
      if constexpr (!kCarry) dstart = dy_start(img, qc, p);
      if constexpr (H3) {
        const float mx = split_row(0.f, sc, (rb + 4 + srr) & (kRing - 1));
        const float md = relayout(dstart + dq, buf ^ 1);  // every lane: it syncs the warp
        ovf = out_of_range(mx, scl[0]) || out_of_range(md, scl[1]);
      } else {
        relayout(dstart + dq, buf ^ 1);
      }
    }
    gmma_wait<0>();
#pragma unroll
    for (int b = 0; b < 2; ++b)
#pragma unroll
      for (int i = 0; i < NACC; ++i) pin(acc[b][i]);

    // 3xFP16: a unit whose values left the run's range is restaged as a new run
    bool redo = false;
    if constexpr (H3) redo = next && __syncthreads_or(ovf);
    loaded = next && !redo;
    rb = next ? ((rb + 4) & (kRing - 1)) : 0;
    dstart += dq;
    // The flush: every FLUSH units, and before a 3xFP16 run sets its scales.
    // (Here, after the wgmmas' last wait: placed before the next unit's, the
    // accumulator writes serialize the wgmmas.)
    if (((FLUSH > 0 && ++since_flush >= FLUSH) || (H3 && !loaded)) && u + 1 < u1) {
      gflush<NT8, H3>(acc, wsl, mrow0, t, ws_written, scl + 2);
      ws_written = true;
      since_flush = 0;
    }
    next_unit(p, qc, img, P, nQc);
  }
  gflush<NT8, H3>(acc, wsl, mrow0, t, ws_written, scl + 2);
#endif
}

template <typename T, int MODE, int NT8, bool VEC, bool DYL>
void launch_gmma(const Problem& pr, const Args& a) {
  const at::Tensor &go = a.grad_output, &in = a.input;
  // dy: NCHW channel planes, or (DYL) channels_last pixels of 16-byte
  // aligned channels (strides of dimensions of one element aside),
  // grad_output or a view of its channels (one filter slice, in place), the
  // kernel's rows past them read as zeros
  const auto dense = [&](int d, int64_t stride) { return go.size(d) == 1 || go.stride(d) == stride; };
  const bool layout_ok =
      DYL ? go.stride(1) == 1 && go.stride(3) * sizeof(T) % 16 == 0 && dense(2, pr.Q * go.stride(3))
          : dense(3, 1) && dense(2, pr.Q) && dense(1, pr.P * pr.Q);
  TORCH_INTERNAL_ASSERT(layout_ok && go.size(1) <= pr.K && reinterpret_cast<uintptr_t>(go.data_ptr()) % 16 == 0,
                        "wgmma weight gradient: a 16-byte aligned ", DYL ? "channels_last" : "NCHW",
                        " dy of at most ", pr.K, " channels");
  // x: kC channels, or (VEC) fewer, a last input slice in place, the
  // kernel's rows past them read as zeros
  TORCH_INTERNAL_ASSERT(in.size(1) == kC || (VEC && in.size(1) >= 1 && in.size(1) < kC),
                        "wgmma weight gradient: ", kC, " input channels, or fewer by 16-byte copies");
  const SplitK sk = split_k(go, in, pr.K, GmmaGeo<T, MODE>::kQC);
  auto stream = c10::cuda::getCurrentCUDAStream();
  constexpr int smem = gsmem_bytes<T, MODE, NT8>();
  auto kern = wgrad_gmma_kernel<T, MODE, NT8, VEC, DYL>;
  allow_max_dynamic_smem(kern);
  kern<<<sk.S, kGThreads, smem, stream>>>(go.data_ptr<T>(), go.stride(0), (int)go.size(1), in.data_ptr<T>(),
                                          (int)in.size(1), in.stride(0), in.stride(1), in.stride(2), in.stride(3),
                                          (int)pr.K, (int)pr.H, (int)pr.W, (int)pr.P, (int)pr.Q, (int)pr.pad, sk.nQc,
                                          sk.U, sk.S, sk.partials(), DYL ? (int)go.stride(3) : 1);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  reduce_partials<T>(sk, pr, a, stream);
}

}  // namespace alexop::cuda::weight_grad::ring
