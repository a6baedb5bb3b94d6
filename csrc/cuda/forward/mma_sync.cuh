#pragma once
// The forward's mma.sync gather kernel (sm_80+), every dtype and precision.
//
// Pipelining: 16-bit types double-buffer the patch (the next tile's copy
// overlaps this tile's MMAs); fp32 has room for one buffer only (141 KB of
// resident weights), so its next copy overlaps just the epilogue stores.
// Channel groups (grid y, NT8 * 8 channels each) serve fp32 K > 96, whose
// weights do not fit beside a patch, and small fp32-accurate batches (see
// select.cu).
//
// Modes (MathMode):
//  - k3xTf32: m16n8k8 TF32; both operands are split into tf32 big + small
//    on the fly and small*big + big*small + big*big are summed: fp32-level
//    accuracy, also where the output cancels.
//  - kBf16x3: each operand is split a = hi + lo (hi = bf16(a), lo =
//    bf16(a - hi)) and lo*hi + hi*lo + hi*hi are summed with m16n8k16 bf16
//    MMAs in fp32 (lo*lo dropped): about 16 bits per operand for half the
//    MMA instructions of 3xTF32. Weights are split once by the prep kernel
//    (hi and lo fragments side by side, same bytes as fp32); activations
//    stay fp32 in the patch and are split while forming the A fragments.
//  - kTf32: m16n8k8 TF32, one product.
//  - k16 / k16Pairs (bf16, fp16): m16n8k16 with fp32 accumulation.

#include "gather.cuh"

namespace alexop::cuda::forward::gather {

// bf16x2 of (lo16 = f0, hi16 = f1), round to nearest even
__device__ __forceinline__ uint32_t pack_bf16x2(float f0, float f1) {
  uint32_t r = 0;
  ALEXOP_SM80_ASM_PURE("cvt.rn.bf16x2.f32 %0, %1, %2;\n" : "=r"(r) : "f"(f1), "f"(f0));
  return r;
}
// a = (f0, f1) -> hi = bf16x2(a), lo = bf16x2(a - hi); a - hi is exact in fp32
__device__ __forceinline__ void split_bf16x2(float f0, float f1, uint32_t& hi, uint32_t& lo) {
  hi = pack_bf16x2(f0, f1);
  lo = pack_bf16x2(f0 - __uint_as_float(hi << 16), f1 - __uint_as_float(hi & 0xffff0000u));
}

// Patch elements of one m16 tile's A fragment, rows g and g+8 at patch
// offsets pm[0], pm[1]. gather4: k offsets o0, o1 in m16n8k8 order (g, o0)
// (g+8, o0) (g, o1) (g+8, o1). gather8: k pairs lo, hi in m16n8k16 order
// (g, lo.x) (g, lo.y) (g+8, lo.x) (g+8, lo.y), then the same for hi.
template <typename E>
__device__ __forceinline__ void gather4(const E* P, const int (&pm)[2], int o0, int o1, E (&v)[4]) {
  v[0] = P[pm[0] + o0]; v[1] = P[pm[1] + o0];
  v[2] = P[pm[0] + o1]; v[3] = P[pm[1] + o1];
}
template <typename E>
__device__ __forceinline__ void gather8(const E* P, const int (&pm)[2], int2 lo, int2 hi, E (&v)[8]) {
  v[0] = P[pm[0] + lo.x]; v[1] = P[pm[0] + lo.y]; v[2] = P[pm[1] + lo.x]; v[3] = P[pm[1] + lo.y];
  v[4] = P[pm[0] + hi.x]; v[5] = P[pm[0] + hi.y]; v[6] = P[pm[1] + hi.x]; v[7] = P[pm[1] + hi.y];
}
// Eight 16-bit elements -> four registers of (low, high) pairs.
__device__ __forceinline__ void pack_pairs(const uint16_t (&r)[8], uint32_t (&a)[4]) {
#pragma unroll
  for (int e = 0; e < 4; ++e) a[e] = (uint32_t)r[2 * e] | ((uint32_t)r[2 * e + 1] << 16);
}

// Weights in fragment order: entry (ks, jj, lane) is a uint4 holding the B
// fragments of n8 tiles 2jj and 2jj+1 for that lane, so the hot loop reads B
// with conflict-free 16-byte loads and no index math.
// blockIdx.y is the channel group (see launch): its NT8 * 8 channels get their
// own fragment block.
template <typename T, int MODE, int NT8>
__global__ void prep_weights_kernel(const T* __restrict__ w, int K, uint32_t* __restrict__ out) {
  constexpr int KS = ksteps<MODE>();
  const int total = KS * (MODE == kBf16x3 ? NT8 : NT8 / 2) * 32;
  const int idx = blockIdx.x * blockDim.x + threadIdx.x;
  if (idx >= total) return;
  const int kg0 = blockIdx.y * NT8 * 8;
  w += (size_t)kg0 * kKred;
  K -= kg0;
  out += (size_t)blockIdx.y * total * 4;
  const int lane = idx & 31, rest = idx >> 5;
  if constexpr (MODE == kBf16x3) {
    // entry (ks, j, lane) = {hi b0, hi b1, lo b0, lo b1} of n8 tile j
    const int j = rest % NT8, ks = rest / NT8;
    const int n = j * 8 + (lane >> 2), k = ks * 16 + 2 * (lane & 3);
    auto v = [&](int kk) -> float { return (kk < kKred && n < K) ? to_f(w[(size_t)n * kKred + kk]) : 0.f; };
    uint32_t h0, l0, h1, l1;
    split_bf16x2(v(k), v(k + 1), h0, l0);
    split_bf16x2(v(k + 8), v(k + 9), h1, l1);
    reinterpret_cast<uint4*>(out)[idx] = make_uint4(h0, h1, l0, l1);
    return;
  }
  const int jj = rest % (NT8 / 2), ks = rest / (NT8 / 2);
  const int g = lane >> 2, t = lane & 3;
  auto val = [&](int k, int n) { return weight_at<T, MODE>(w, K, k, n); };
  uint32_t v[4];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int n = (2 * jj + h) * 8 + g;
    if constexpr (MODE == k16 || MODE == k16Pairs) {
      const int k = ks * 16 + 2 * t;
      v[2 * h] = pack2(from_f<T>(val(k, n)), from_f<T>(val(k + 1, n)));
      v[2 * h + 1] = pack2(from_f<T>(val(k + 8, n)), from_f<T>(val(k + 9, n)));
    } else {
      const int k = ks * 8 + t;
      v[2 * h] = tf32_or_raw(val(k, n), MODE == kTf32);
      v[2 * h + 1] = tf32_or_raw(val(k + 4, n), MODE == kTf32);
    }
  }
  reinterpret_cast<uint4*>(out)[idx] = make_uint4(v[0], v[1], v[2], v[3]);
}

template <typename T, int MODE, int NT8, int NBUF>
__global__ void __launch_bounds__(kThreads, 1) conv11s4_fwd_tc_kernel(const Params p) {
  extern __shared__ __align__(16) unsigned char smem[];
  constexpr int KS = ksteps<MODE>();
  constexpr int WB = wfrag_bytes<MODE, NT8>();
  constexpr int NJ = NT8 / 2;
  constexpr int NTW = NT8 / kNSplit;  // n8 tiles per warp
  constexpr int NJW = NTW / 2;  // fragment pairs per warp
  const uint4* ws = reinterpret_cast<const uint4*>(smem);
  int* offk = reinterpret_cast<int*>(smem + WB);
  float* sbias = reinterpret_cast<float*>(smem + WB + kKtab * 4);
  T* patch0 = reinterpret_cast<T*>(smem + WB + kKtab * 4 + kMaxK * 4);
  const int buf_elems = kC * p.CS;

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int g = lane >> 2, t = lane & 3;
  init_smem<T, MODE, NT8, NBUF>(p, smem);

  int tile = blockIdx.x;
  int buf = 0;
  if (tile < p.total_tiles) load_patch<T>(p, tile_geom(p, tile), patch0, warp, lane);
  cp_async_commit();

  for (; tile < p.total_tiles; tile += gridDim.x) {
    cp_async_wait_all();
    __syncthreads();
    const TileGeom tg = tile_geom(p, tile);
    const int next = tile + gridDim.x;
    if constexpr (NBUF == 2) {
      if (next < p.total_tiles)
        load_patch<T>(p, tile_geom(p, next), patch0 + (buf ^ 1) * buf_elems, warp, lane);
      cp_async_commit();
    }

    const int mjob = warp & (kMJobs - 1), nh = warp / kMJobs;
    const int mj = tg.m0 + mjob * 32;  // this warp's 32 pixels
    const bool active = (mjob * 32 < p.MT) && (mj < tg.mend);
    float acc[2][NTW][4];
#pragma unroll
    for (int a = 0; a < 2; ++a)
#pragma unroll
      for (int j = 0; j < NTW; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) acc[a][j][e] = 0.f;

    if (active) {
      int pm[2][2];  // patch offsets of rows g and g+8 of both m16 tiles
#pragma unroll
      for (int a = 0; a < 2; ++a)
#pragma unroll
        for (int hh = 0; hh < 2; ++hh) {
          int m = min(mj + a * 16 + hh * 8 + g, tg.mend - 1);  // clamp keeps reads in loaded rows
          const int pp = m / tg.Qb, qq = m - pp * tg.Qb;
          pm[a][hh] = 4 * p.rstr * (pp - tg.p_lo) + (4 * qq + p.shift) * p.sstr;
        }
      const T* P = patch0 + buf * buf_elems;
      // Operands for step ks+1 (and table offsets for ks+2) are fetched
      // before the MMAs of step ks, so the two dependent shared-memory loads
      // (table, then gather) overlap the tensor-core work of two warps/SMSP.
      if constexpr (MODE == k16Pairs) {
#pragma unroll
        for (int a = 0; a < 2; ++a)
#pragma unroll
          for (int hh = 0; hh < 2; ++hh) pm[a][hh] >>= 1;  // element -> word offset (even by construction)
      }
      if constexpr (MODE == kBf16x3) {
        // bf16x3: A stays fp32 in the patch and is split per k16 step;
        // element e of af[a] follows the m16n8k16 A fragment: (row, k) =
        // (g, 2t) (g, 2t+1) (g+8, 2t) (g+8, 2t+1) (g, 2t+8) (g, 2t+9)
        // (g+8, 2t+8) (g+8, 2t+9).
        const float* Pf = reinterpret_cast<const float*>(P);
        const int2* offk2 = reinterpret_cast<const int2*>(offk);
        int2 olo = offk2[t], ohi = offk2[t + 4];
        float af[2][8];
#pragma unroll
        for (int a = 0; a < 2; ++a) gather8(Pf, pm[a], olo, ohi, af[a]);
        olo = offk2[8 + t]; ohi = offk2[12 + t];
#pragma unroll 2
        for (int ks = 0; ks < KS; ++ks) {
          float an[2][8];
#pragma unroll
          for (int a = 0; a < 2; ++a) gather8(Pf, pm[a], olo, ohi, an[a]);
          olo = offk2[(ks + 2) * 8 + t]; ohi = offk2[(ks + 2) * 8 + t + 4];
          uint32_t ah[2][4], al[2][4];
#pragma unroll
          for (int a = 0; a < 2; ++a)
#pragma unroll
            for (int e = 0; e < 4; ++e) split_bf16x2(af[a][2 * e], af[a][2 * e + 1], ah[a][e], al[a][e]);
          constexpr int G = NTW % kB3Group == 0 ? kB3Group : 2;
#pragma unroll
          for (int j0 = 0; j0 < NTW; j0 += G) {
            uint4 b[G];
#pragma unroll
            for (int jg = 0; jg < G; ++jg) b[jg] = ws[(ks * NT8 + nh * NTW + j0 + jg) * 32 + lane];
            // small products first, pass-major: the three MMAs into one
            // accumulator are 2G independent MMAs apart
#pragma unroll
            for (int jg = 0; jg < G; ++jg)
#pragma unroll
              for (int a = 0; a < 2; ++a)
                mma_16<__nv_bfloat16>(acc[a][j0 + jg], al[a], b[jg].x, b[jg].y);
#pragma unroll
            for (int jg = 0; jg < G; ++jg)
#pragma unroll
              for (int a = 0; a < 2; ++a)
                mma_16<__nv_bfloat16>(acc[a][j0 + jg], ah[a], b[jg].z, b[jg].w);
#pragma unroll
            for (int jg = 0; jg < G; ++jg)
#pragma unroll
              for (int a = 0; a < 2; ++a)
                mma_16<__nv_bfloat16>(acc[a][j0 + jg], ah[a], b[jg].x, b[jg].y);
          }
#pragma unroll
          for (int a = 0; a < 2; ++a)
#pragma unroll
            for (int e = 0; e < 8; ++e) af[a][e] = an[a][e];
        }
      } else if constexpr (MODE != k16) {
        const float* Pf = reinterpret_cast<const float*>(P);
        int o0 = offk[t], o1 = offk[t + 4];
        float af[2][4];
#pragma unroll
        for (int a = 0; a < 2; ++a) gather4(Pf, pm[a], o0, o1, af[a]);
        o0 = offk[8 + t]; o1 = offk[12 + t];
#pragma unroll 2
        for (int ks = 0; ks < KS; ++ks) {
          float an[2][4];
#pragma unroll
          for (int a = 0; a < 2; ++a) gather4(Pf, pm[a], o0, o1, an[a]);
          o0 = offk[(ks + 2) * 8 + t]; o1 = offk[(ks + 2) * 8 + t + 4];
          uint32_t ab[2][4], as[2][4];
#pragma unroll
          for (int a = 0; a < 2; ++a)
#pragma unroll
            for (int e = 0; e < 4; ++e) {
              if constexpr (MODE == k16Pairs) {
                ab[a][e] = __float_as_uint(af[a][e]);  // already a packed bf16/f16 pair
              } else if constexpr (MODE == k3xTf32) {
                split_3xtf32(af[a][e], ab[a][e], as[a][e]);
              } else {
                ab[a][e] = to_tf32(af[a][e]);
              }
            }
#pragma unroll
          for (int jj = 0; jj < NJW; ++jj) {
            const uint4 b = ws[(ks * NJ + nh * NJW + jj) * 32 + lane];
            const uint32_t braw[2][2] = {{b.x, b.y}, {b.z, b.w}};
            if constexpr (MODE == k3xTf32) {
              mma_3xtf32_2x2(acc, 2 * jj, ab, as, braw);
            } else if constexpr (MODE == k16Pairs) {
#pragma unroll
              for (int hh = 0; hh < 2; ++hh)
#pragma unroll
                for (int a = 0; a < 2; ++a)
                  mma_16<T>(acc[a][2 * jj + hh], ab[a], braw[hh][0], braw[hh][1]);
            } else {
#pragma unroll
              for (int hh = 0; hh < 2; ++hh)
#pragma unroll
                for (int a = 0; a < 2; ++a)
                  mma_tf32(acc[a][2 * jj + hh], ab[a], braw[hh][0], braw[hh][1]);
            }
          }
#pragma unroll
          for (int a = 0; a < 2; ++a)
#pragma unroll
            for (int e = 0; e < 4; ++e) af[a][e] = an[a][e];
        }
      } else {
        const uint16_t* Ph = reinterpret_cast<const uint16_t*>(P);
        const int2* offk2 = reinterpret_cast<const int2*>(offk);
        int2 olo = offk2[t], ohi = offk2[t + 4];
        uint32_t af[2][4];
#pragma unroll
        for (int a = 0; a < 2; ++a) {
          uint16_t r0[8];
          gather8(Ph, pm[a], olo, ohi, r0);
          pack_pairs(r0, af[a]);
        }
        olo = offk2[8 + t]; ohi = offk2[12 + t];
#pragma unroll 2
        for (int ks = 0; ks < KS; ++ks) {
          uint16_t rn[2][8];
#pragma unroll
          for (int a = 0; a < 2; ++a) gather8(Ph, pm[a], olo, ohi, rn[a]);
          olo = offk2[(ks + 2) * 8 + t]; ohi = offk2[(ks + 2) * 8 + t + 4];
#pragma unroll
          for (int jj = 0; jj < NJW; ++jj) {
            const uint4 b = ws[(ks * NJ + nh * NJW + jj) * 32 + lane];
#pragma unroll
            for (int a = 0; a < 2; ++a) {
              mma_16<T>(acc[a][2 * jj], af[a], b.x, b.y);
              mma_16<T>(acc[a][2 * jj + 1], af[a], b.z, b.w);
            }
          }
#pragma unroll
          for (int a = 0; a < 2; ++a) pack_pairs(rn[a], af[a]);
        }
      }
    }

    if constexpr (NBUF == 1) {
      __syncthreads();  // every warp is done reading the patch
      if (next < p.total_tiles) load_patch<T>(p, tile_geom(p, next), patch0, warp, lane);
      cp_async_commit();
    } else {
      buf ^= 1;
    }

    // Epilogue straight from the accumulators: for one register, lanes with
    // the same t write 8 consecutive pixels of one channel plane (NCHW) or
    // lanes with the same g 4 channels of one pixel (channels_last).
    if (active) {
      // this CTA's channel group: channels kg0 + [0, NT8 * 8), kg0 + kend at most
      const int kg0 = blockIdx.y * NT8 * 8, kend = p.K - kg0;
      exact::fix_nan<2 * NTW * 4>(&acc[0][0][0], [&](int i, float v) {
        const int a = i / (NTW * 4), j = i / 4 % NTW, hh = (i >> 1) & 1, e = i & 1;
        const int ch = (nh * NTW + j) * 8 + 2 * t + e, m = mj + a * 16 + hh * 8 + g;
        return ch < kend && m < tg.mend ? exact_output<T>(p, tg.n, kg0 + ch, out_pixel(p, tg, m)) : v;
      });
      T* y = static_cast<T*>(p.y) + (size_t)tg.n * p.K * p.PQ + (size_t)kg0 * p.ysc;
      int op[2][2];  // output pixels of the thread's rows
#pragma unroll
      for (int a = 0; a < 2; ++a)
#pragma unroll
        for (int hh = 0; hh < 2; ++hh) op[a][hh] = out_pixel(p, tg, mj + a * 16 + hh * 8 + g);
      with_accumulate<T>(p.accumulate, [&](auto add) {
#pragma unroll
        for (int j = 0; j < NTW; ++j) {
#pragma unroll
          for (int e = 0; e < 2; ++e) {
            const int ch = (nh * NTW + j) * 8 + 2 * t + e;
            if (ch >= kend) continue;
            const float bv = sbias[ch];
            T* yc = y + (size_t)ch * p.ysc;
#pragma unroll
            for (int a = 0; a < 2; ++a)
#pragma unroll
              for (int hh = 0; hh < 2; ++hh) {
                const int m = mj + a * 16 + hh * 8 + g;
                if (m < tg.mend) put<decltype(add)>(yc + (size_t)op[a][hh] * p.ysm, acc[a][j][hh * 2 + e] + bv);
              }
          }
        }
      });
    }
  }
}

}  // namespace alexop::cuda::forward::gather
