// The input gradient on mma.sync (sm_80+): every precision.
//
// A persistent CTA of 8 warps, one per SM, loops over tiles; warp w owns 32
// super-pixels (2 m16 tiles) x all 48 columns (6 n8 tiles). B (weights) is
// resident, written once per CTA from a buffer that the prep kernel arranges
// in mma fragment order: entry (ks, jj, lane) is a uint4 = {b0, b1 of n8
// tile 2jj, b0, b1 of n8 tile 2jj + 1}, ks = stage*9 + tap; zeros where
// r > 10, s > 10 or the channel is >= K. dy loads are register-staged (the
// next stage's global loads are issued before this stage's MMAs, stored to
// the other buffer after them; one barrier per stage), which also does the
// 16-bit channel-pair interleave. Epilogue straight from the accumulators:
// one shuffle with the neighbour lane (t ^ 1) gives each lane the 4 columns
// b = 0..3 of one (pixel, c, a), written as 4 consecutive dx elements (two
// 8- / 4-byte pair stores when pad and W are even) with masks for rows and
// columns outside the image.
//
// Modes: k3xTf32 (fp32 "highest": m16n8k8, both operands split big + small
// on the fly, small*big + big*small + big*big, pass-major; the accumulators
// are flushed into a round-to-nearest fp32 total after every stage of 27
// MMAs, since the tensor cores' accumulation truncates); kTf32 (one TF32
// product: the prep kernel rounds B to TF32, A is rounded while forming the
// fragments); k16 (bf16 / fp16, m16n8k16 with fp32 accumulation).

#include "plan.h"

namespace alexop::cuda::input_grad::phase {

// B in fragment order (see top). Entry idx = (ks * kNJ + jj) * 32 + lane.
template <typename T, int MODE>
__global__ void dgrad_prep_weights_kernel(const T* __restrict__ w, int K, int nstage,
                                          uint4* __restrict__ out) {
  const int total = nstage * kTaps * kNJ * 32;
  const int idx = blockIdx.x * blockDim.x + threadIdx.x;
  if (idx >= total) return;
  const int lane = idx & 31, rest = idx >> 5;
  const int jj = rest % kNJ, ks = rest / kNJ;
  const int st = ks / kTaps, tap = ks - st * kTaps;
  const int g = lane >> 2, t = lane & 3;
  auto val = [&](int ch, int n) { return phase_weight(w, K, tap, n, ch); };
  uint32_t v[4];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int n = (2 * jj + h) * 8 + g;
    if constexpr (MODE == k16) {
      const int ch = st * 16 + 2 * t;  // b0: k = 2t, 2t+1; b1: k = 2t+8, 2t+9
      v[2 * h] = pack2(from_f<T>(val(ch, n)), from_f<T>(val(ch + 1, n)));
      v[2 * h + 1] = pack2(from_f<T>(val(ch + 8, n)), from_f<T>(val(ch + 9, n)));
    } else {
      const int ch = st * 8 + t;  // b0: k = t; b1: k = t + 4
      v[2 * h] = tf32_or_raw(val(ch, n), MODE == kTf32);
      v[2 * h + 1] = tf32_or_raw(val(ch + 4, n), MODE == kTf32);
    }
  }
  out[idx] = make_uint4(v[0], v[1], v[2], v[3]);
}

template <typename T, int MODE>
__global__ void __launch_bounds__(kThreads, 1) conv11s4_dgrad_tc_kernel(const Params p) {
  extern __shared__ __align__(16) unsigned char smem[];
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int g = lane >> 2, t = lane & 3;
  const int KS = kTaps * p.nstage;
  uint4* ws = reinterpret_cast<uint4*>(smem);
  uint32_t* bufs = reinterpret_cast<uint32_t*>(smem + (size_t)KS * kNJ * 32 * 16);

  int tile = blockIdx.x;
  if (tile >= p.total_tiles) return;

  for (int i = tid; i < KS * kNJ * 32; i += kThreads) cp_async16(ws + i, p.wfrag + i);
  cp_async_commit();

  TileGeom tg = tile_geom(p, tile);
  int goff[kLoadsPerThread];
  loader_offsets<kThreads>(p, tg, tid, goff);
  StageRegs<kThreads> sr;
  load_stage<T, MODE, kThreads>(p, tg.n, goff, 0, sr);
  store_stage<kThreads>(sr, bufs, tid, goff);
  cp_async_wait_all();
  __syncthreads();

  const int bandpix = p.PS * p.TQ;
  int it = 0;
  while (true) {
    // This lane's super-pixels: m16 tile a, row g + 8h. (Written out here and
    // in the epilogue: the wgmma kernel's lane_pixels and store_dx_n8 made
    // this kernel slower in 3xTF32, with more registers.)
    int sp[2][2];      // smem word offset t*kCHS + window offset of the pixel
    int y0[2], x0[2];  // epilogue pixel (h = t & 1): 4*P0 - pad, 4*Q0 - pad; y0 huge if invalid
#pragma unroll
    for (int a = 0; a < 2; ++a)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int ml = warp * 32 + a * 16 + h * 8 + g;
        const int mb = tg.m0 + ml;
        const int prel = mb / p.TQ, qrel = mb - prel * p.TQ;
        const bool valid = ml < p.MT && mb < bandpix && tg.qb + qrel < p.QS;
        const int off = valid ? (prel - tg.prel_lo + 2) * p.RSW + qrel + 2 : 2 * p.RSW + 2;
        sp[a][h] = t * kCHS + off;
        if (h == (t & 1)) {
          y0[a] = valid ? 4 * (p.P0s + prel) - p.pad : INT32_MIN / 2;
          x0[a] = 4 * (p.Q0s + tg.qb + qrel) - p.pad;
        }
      }

    // 3xTF32 also keeps a running total: the tensor cores' fp32 accumulation
    // truncates, so each stage's 27 MMAs go into acc, which is then added
    // (round to nearest) into tot and cleared (the weight grad's "flush").
    float acc[2][kNT8][4], tot[2][kNT8][4];
#pragma unroll
    for (int a = 0; a < 2; ++a)
#pragma unroll
      for (int j = 0; j < kNT8; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) acc[a][j][e] = tot[a][j][e] = 0.f;

    const int ntile = tile + gridDim.x;
    TileGeom ng = tg;
    int ngoff[kLoadsPerThread];
#pragma unroll
    for (int u = 0; u < kLoadsPerThread; ++u) ngoff[u] = goff[u];

    for (int st = 0; st < p.nstage; ++st) {
      // Issue the next stage's global loads (this tile's next stage, or the
      // next tile's first) before this stage's MMAs.
      bool more = true;
      if (st + 1 < p.nstage) {
        load_stage<T, MODE, kThreads>(p, tg.n, goff, st + 1, sr);
      } else if (ntile < p.total_tiles) {
        ng = tile_geom(p, ntile);
        loader_offsets<kThreads>(p, ng, tid, ngoff);
        load_stage<T, MODE, kThreads>(p, ng.n, ngoff, 0, sr);
      } else {
        more = false;
      }

      const uint32_t* S = bufs + (it & 1) * kBufWords;
      const uint4* B = ws + (size_t)st * kTaps * kNJ * 32 + lane;
#pragma unroll
      for (int tap = 0; tap < kTaps; ++tap) {
        const int ti = tap / 3, tj = tap - 3 * (tap / 3);
        const int toff = ti * p.RSW + tj;
        uint32_t araw[2][4];
#pragma unroll
        for (int a = 0; a < 2; ++a) {
          araw[a][0] = S[sp[a][0] - toff];
          araw[a][1] = S[sp[a][1] - toff];
          araw[a][2] = S[sp[a][0] - toff + 4 * kCHS];
          araw[a][3] = S[sp[a][1] - toff + 4 * kCHS];
        }
        uint4 bq[kNJ];
#pragma unroll
        for (int jj = 0; jj < kNJ; ++jj) bq[jj] = B[(tap * kNJ + jj) * 32];

        if constexpr (MODE == k16) {
#pragma unroll
          for (int jj = 0; jj < kNJ; ++jj)
#pragma unroll
            for (int a = 0; a < 2; ++a) {
              mma_16<T>(acc[a][2 * jj], araw[a], bq[jj].x, bq[jj].y);
              mma_16<T>(acc[a][2 * jj + 1], araw[a], bq[jj].z, bq[jj].w);
            }
        } else if constexpr (MODE == kTf32) {
          uint32_t ab[2][4];
#pragma unroll
          for (int a = 0; a < 2; ++a)
#pragma unroll
            for (int e = 0; e < 4; ++e) ab[a][e] = to_tf32(__uint_as_float(araw[a][e]));
#pragma unroll
          for (int jj = 0; jj < kNJ; ++jj)
#pragma unroll
            for (int a = 0; a < 2; ++a) {
              mma_tf32(acc[a][2 * jj], ab[a], bq[jj].x, bq[jj].y);
              mma_tf32(acc[a][2 * jj + 1], ab[a], bq[jj].z, bq[jj].w);
            }
        } else {
          uint32_t ab[2][4], as[2][4];
#pragma unroll
          for (int a = 0; a < 2; ++a)
#pragma unroll
            for (int e = 0; e < 4; ++e) split_3xtf32(__uint_as_float(araw[a][e]), ab[a][e], as[a][e]);
#pragma unroll
          for (int jj = 0; jj < kNJ; ++jj) {
            const uint32_t braw[2][2] = {{bq[jj].x, bq[jj].y}, {bq[jj].z, bq[jj].w}};
            mma_3xtf32_2x2(acc, 2 * jj, ab, as, braw);
          }
        }
      }

      if constexpr (MODE == k3xTf32) {
#pragma unroll
        for (int a = 0; a < 2; ++a)
#pragma unroll
          for (int j = 0; j < kNT8; ++j)
#pragma unroll
            for (int e = 0; e < 4; ++e) {
              tot[a][j][e] += acc[a][j][e];
              acc[a][j][e] = 0.f;
            }
      }
      if (more) {
        int sg[kLoadsPerThread];
#pragma unroll
        for (int u = 0; u < kLoadsPerThread; ++u) sg[u] = st + 1 < p.nstage ? goff[u] : ngoff[u];
        store_stage<kThreads>(sr, bufs + ((it + 1) & 1) * kBufWords, tid, sg);
      }
      __syncthreads();
      ++it;
    }

    // Epilogue: lane (g, t) gets the 4 columns b = 0..3 of pixel row g + 8*(t&1),
    // a = 2*(nt&1) + (t>>1), channel c = nt>>1, from its own pair and lane t^1's.
    {
      flag_nan<2 * kNT8 * 4>(p, MODE == k3xTf32 ? &tot[0][0][0] : &acc[0][0][0]);
      T* dx = static_cast<T*>(p.dx) + (size_t)tg.n * p.dxs;
      const bool odd = t & 1;
#pragma unroll
      for (int a = 0; a < 2; ++a)
#pragma unroll
        for (int nt = 0; nt < kNT8; ++nt) {
          const float* c = MODE == k3xTf32 ? tot[a][nt] : acc[a][nt];
          const float s0 = odd ? c[0] : c[2], s1 = odd ? c[1] : c[3];
          const float r0 = __shfl_xor_sync(0xffffffffu, s0, 1);
          const float r1 = __shfl_xor_sync(0xffffffffu, s1, 1);
          float v[4];
          v[0] = odd ? r0 : c[0];
          v[1] = odd ? r1 : c[1];
          v[2] = odd ? c[2] : r0;
          v[3] = odd ? c[3] : r1;
          const int ch = nt >> 1, aph = (nt & 1) * 2 + (t >> 1);
          const int y = y0[a] + aph;
          if (y < 0 || y >= p.H) continue;
          T* row = dx + ((size_t)ch * p.H + y) * p.W;
          const int x = x0[a];
          if (p.vec2) {
            // x even, W even: each pair is wholly inside or outside [0, W)
#pragma unroll
            for (int bp = 0; bp < 2; ++bp) {
              const int xx = x + 2 * bp;
              if (xx < 0 || xx >= p.W) continue;
              if constexpr (std::is_same_v<T, float>) {
                *reinterpret_cast<float2*>(row + xx) = make_float2(v[2 * bp], v[2 * bp + 1]);
              } else {
                const uint32_t w2 = pack2(from_f<T>(v[2 * bp]), from_f<T>(v[2 * bp + 1]));
                *reinterpret_cast<uint32_t*>(row + xx) = w2;
              }
            }
          } else {
#pragma unroll
            for (int b = 0; b < 4; ++b) {
              const int xx = x + b;
              if (xx >= 0 && xx < p.W) row[xx] = from_f<T>(v[b]);
            }
          }
        }
    }

    if (ntile >= p.total_tiles) break;
    tile = ntile;
    tg = ng;
#pragma unroll
    for (int u = 0; u < kLoadsPerThread; ++u) goff[u] = ngoff[u];
  }
}

template <typename T, int MODE>
void launch_mma(const Problem& pr, const Args& a) {
  launch_gather<T>(pr, a, stage_channels<MODE>(), dgrad_prep_weights_kernel<T, MODE>, conv11s4_dgrad_tc_kernel<T, MODE>,
                   kThreads);
}

template void launch_mma<float, k3xTf32>(const Problem&, const Args&);
template void launch_mma<float, kTf32>(const Problem&, const Args&);
template void launch_mma<__nv_bfloat16, k16>(const Problem&, const Args&);
template void launch_mma<__half, k16>(const Problem&, const Args&);

}  // namespace alexop::cuda::input_grad::phase
