#pragma once
// Inline-PTX building blocks shared by the tensor-core kernels (sm_80+):
// cp.async copies into shared memory (plain, 4-byte zero-filling, group
// waits), TF32 rounding, the mma.sync shapes they use, float <-> storage
// conversions, and the scaling and splitting of 3xFP16. wgmma lives in
// wgmma.cuh.

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

// CTAs of 256 threads that an SM holds (2048 threads; 1024 on sm_75; 1536
// on sm_86, sm_89 and sm_120): the most a kernel of 256 threads may ask for
// in __launch_bounds__, where ptxas ignores more with a warning.
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ == 750
#define ALEXOP_CTAS_OF_256 4
#elif defined(__CUDA_ARCH__) && (__CUDA_ARCH__ == 860 || __CUDA_ARCH__ == 890 || __CUDA_ARCH__ >= 1200)
#define ALEXOP_CTAS_OF_256 6
#else
#define ALEXOP_CTAS_OF_256 8
#endif

// Turing (sm_75) has none of cp.async, TF32 / bf16 conversion and the
// m16n8k16 / TF32 mma.sync shapes: in an sm_75 image the primitives built on
// them trap instead, and the selectors never choose their kernels there
// (tensor_core_kernels, common/device.h).
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 800
#define ALEXOP_SM80_ASM(...) __trap()
#define ALEXOP_SM80_ASM_PURE(...) __trap()
#else
#define ALEXOP_SM80_ASM(...) asm volatile(__VA_ARGS__)
#define ALEXOP_SM80_ASM_PURE(...) asm(__VA_ARGS__)
#endif

namespace alexop::cuda {

__device__ __forceinline__ uint32_t smem_u32(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}
__device__ __forceinline__ void cp_async16(void* dst, const void* src) {
  ALEXOP_SM80_ASM("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(smem_u32(dst)), "l"(src));
}
__device__ __forceinline__ void cp_async4(void* dst, const void* src) {
  ALEXOP_SM80_ASM("cp.async.ca.shared.global [%0], [%1], 4;\n" ::"r"(smem_u32(dst)), "l"(src));
}
__device__ __forceinline__ void cp_async_commit() { ALEXOP_SM80_ASM("cp.async.commit_group;\n" ::); }
__device__ __forceinline__ void cp_async_wait_all() { ALEXOP_SM80_ASM("cp.async.wait_all;\n" ::: "memory"); }
// 4 bytes to shared address dst: the first nbytes (0, 2 or 4) from src, the
// rest zero-filled. src must be a valid address even when nbytes is 0.
__device__ __forceinline__ void cp_async4n(uint32_t dst, const void* src, int nbytes) {
  ALEXOP_SM80_ASM("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(dst), "l"(src), "r"(nbytes));
}
// The same for 8 bytes (nbytes 0 or 8; dst and src 8-byte aligned).
__device__ __forceinline__ void cp_async8n(uint32_t dst, const void* src, int nbytes) {
  ALEXOP_SM80_ASM("cp.async.ca.shared.global [%0], [%1], 8, %2;\n" ::"r"(dst), "l"(src), "r"(nbytes));
}
// The same for 16 bytes (nbytes 0 to 16; dst and src 16-byte aligned).
__device__ __forceinline__ void cp_async16n(uint32_t dst, const void* src, int nbytes) {
  ALEXOP_SM80_ASM("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(nbytes));
}
// cp_async4n where pred holds, else nothing: predicated, not branched (a
// branch between wgmmas makes ptxas serialize them).
__device__ __forceinline__ void cp_async4n_if(uint32_t dst, const void* src, int nbytes, bool pred) {
  ALEXOP_SM80_ASM("{\n.reg .pred p;\nsetp.ne.b32 p, %3, 0;\n@p cp.async.ca.shared.global [%0], [%1], 4, %2;\n}\n" ::"r"(dst),
               "l"(src), "r"(nbytes), "r"((int)pred));
}
// cp_async16n where pred holds (predicated likewise).
__device__ __forceinline__ void cp_async16n_if(uint32_t dst, const void* src, int nbytes, bool pred) {
  ALEXOP_SM80_ASM("{\n.reg .pred p;\nsetp.ne.b32 p, %3, 0;\n@p cp.async.cg.shared.global [%0], [%1], 16, %2;\n}\n" ::"r"(dst),
               "l"(src), "r"(nbytes), "r"((int)pred));
}
// One word to shared address dst where pred holds (predicated likewise).
__device__ __forceinline__ void st_shared_u32_if(uint32_t dst, uint32_t a, bool pred) {
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %2, 0;\n@p st.shared.b32 [%0], %1;\n}\n" ::"r"(dst), "r"(a), "r"((int)pred)
               : "memory");
}
// One arrival on the mbarrier at shared address bar once all of this
// thread's earlier cp.async copies have landed (counted in its expected
// arrivals: .noinc).
__device__ __forceinline__ void cp_async_arrive_noinc(uint32_t bar) {
  ALEXOP_SM80_ASM("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];\n" ::"r"(bar) : "memory");
}
// Programmatic dependent launch (sm_90+; no-ops below, and for a grid not
// launched by launch_dependent). The primary lets its dependent grid start
// early; the dependent waits until the primary has finished and its writes
// are visible before it reads them.
__device__ __forceinline__ void pdl_launch_dependents() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
#endif
}
__device__ __forceinline__ void pdl_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;\n" ::: "memory");
#endif
}
// Waits until at most N of this thread's committed cp.async groups are pending.
template <int N> __device__ __forceinline__ void cp_async_wait_group() {
  ALEXOP_SM80_ASM("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

// Four 8 x 8 b16 matrices from shared memory; lane l gives the address of
// row l & 7 of matrix l >> 3 and receives (row l / 4, columns 2 (l & 3) and
// + 1) of each: the mma.sync / wgmma A-fragment order for 16-bit operands,
// and the word (row l / 4, column l & 3) of 8 x 4 fp32 matrices for TF32.
__device__ __forceinline__ void ldsm_x4(uint32_t saddr, uint32_t (&r)[4]) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(saddr));
}

// Round to nearest (ties away) to TF32, the bits the tensor core reads.
__device__ __forceinline__ uint32_t to_tf32(float f) {
  uint32_t r = 0;
  ALEXOP_SM80_ASM_PURE("cvt.rna.tf32.f32 %0, %1;\n" : "=r"(r) : "f"(f));
  return r;
}

// 3xTF32 operand split: big = f rounded to TF32, small = the remainder
// rounded to TF32; big + small keeps about 21 bits of f.
__device__ __forceinline__ void split_3xtf32(float f, uint32_t& big, uint32_t& small) {
  big = to_tf32(f);
  small = to_tf32(f - __uint_as_float(big));
}

// c += a * b, m16n8k8, TF32 operands in mma.sync fragment order.
__device__ __forceinline__ void mma_tf32(float* c, const uint32_t* a, uint32_t b0, uint32_t b1) {
  ALEXOP_SM80_ASM_PURE("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// c += a * b, m16n8k16, T = __nv_bfloat16 or __half operands, fp32 accumulation.
template <typename T>
__device__ __forceinline__ void mma_16(float* c, const uint32_t* a, uint32_t b0, uint32_t b1) {
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    ALEXOP_SM80_ASM_PURE("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  } else {
    static_assert(std::is_same_v<T, __half>, "bf16 or fp16 operands");
    ALEXOP_SM80_ASM_PURE("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
}

// 3xTF32 on a 2 x 2 block of tiles: A of two m16 tiles already split into
// ab (big) and as (small), B of n8 tiles j and j + 1 as raw fp32 fragment
// pairs, split here. Pass-major (small*big, big*small, big*big), so the three
// products into one accumulator are four independent MMAs apart.
template <int NT>
__device__ __forceinline__ void mma_3xtf32_2x2(float (&acc)[2][NT][4], int j, const uint32_t (&ab)[2][4],
                                               const uint32_t (&as)[2][4], const uint32_t (&braw)[2][2]) {
  uint32_t bb[2][2], bs[2][2];
#pragma unroll
  for (int hh = 0; hh < 2; ++hh)
#pragma unroll
    for (int e = 0; e < 2; ++e) split_3xtf32(__uint_as_float(braw[hh][e]), bb[hh][e], bs[hh][e]);
#pragma unroll
  for (int hh = 0; hh < 2; ++hh)
#pragma unroll
    for (int a = 0; a < 2; ++a) mma_tf32(acc[a][j + hh], as[a], bb[hh][0], bb[hh][1]);
#pragma unroll
  for (int hh = 0; hh < 2; ++hh)
#pragma unroll
    for (int a = 0; a < 2; ++a) mma_tf32(acc[a][j + hh], ab[a], bs[hh][0], bs[hh][1]);
#pragma unroll
  for (int hh = 0; hh < 2; ++hh)
#pragma unroll
    for (int a = 0; a < 2; ++a) mma_tf32(acc[a][j + hh], ab[a], bb[hh][0], bb[hh][1]);
}

// The bits of a 16-bit value, and two of them as one operand register (lo in
// bits 0-15: the element order of mma.sync / wgmma pairs).
template <typename T> __device__ __forceinline__ uint16_t bits16(T v) {
  static_assert(sizeof(T) == 2, "16-bit types only");
  return reinterpret_cast<const uint16_t&>(v);
}
template <typename T> __device__ __forceinline__ uint32_t pack2(T lo, T hi) {
  return (uint32_t)bits16(lo) | ((uint32_t)bits16(hi) << 16);
}
// An fp32 B operand word: TF32-rounded, or the raw fp32 bits that 3xTF32
// splits in its hot loop.
__device__ __forceinline__ uint32_t tf32_or_raw(float f, bool round) {
  return round ? to_tf32(f) : __float_as_uint(f);
}

template <typename T> __device__ __forceinline__ float to_f(T v) { return static_cast<float>(v); }
template <> __device__ __forceinline__ float to_f(__nv_bfloat16 v) { return __bfloat162float(v); }
template <> __device__ __forceinline__ float to_f(__half v) { return __half2float(v); }
template <typename T> __device__ __forceinline__ T from_f(float v) { return static_cast<T>(v); }
template <> __device__ __forceinline__ __nv_bfloat16 from_f(float v) { return __float2bfloat16_rn(v); }
template <> __device__ __forceinline__ __half from_f(float v) { return __float2half_rn(v); }

// A sliced float32 forward's later channel slices add their part to the
// first's in memory, without waiting for y (a reduction, red): a
// load-add-store would wait for each load in turn, as the compiler cannot
// move a load above stores that may alias it. (16-bit reductions ran far
// slower: those slices write partial outputs instead.) The fp32 reduction
// may flush subnormal sums to zero.
__device__ __forceinline__ void red_add(float* y, float v) {
  asm volatile("red.global.add.f32 [%0], %1;\n" ::"l"(y), "f"(v));
}
// f(std::true_type{}) where a float32 output is accumulated, else
// f(std::false_type{}): the flag taken out of an epilogue's loops.
template <typename T, typename F> __device__ __forceinline__ void with_accumulate(bool accumulate, F&& f) {
  if constexpr (std::is_same_v<T, float>) {
    if (accumulate) return f(std::true_type{});
  }
  f(std::false_type{});
}
// An output element written, or added to y (ADD, from with_accumulate).
template <typename ADD, typename T> __device__ __forceinline__ void put(T* y, float v) {
  if constexpr (ADD::value) {
    red_add(y, v);
  } else {
    *y = from_f<T>(v);
  }
}

// Two adjacent output elements y[0], y[1] (channels 2t and 2t + 1 of one
// pixel of a channels_last output) in one store; y 2-element aligned.
template <typename ADD, typename T> __device__ __forceinline__ void put2(T* y, float a, float b) {
  if constexpr (ADD::value) {
    red_add(y, a);
    red_add(y + 1, b);
  } else if constexpr (std::is_same_v<T, float>) {
    *reinterpret_cast<float2*>(y) = make_float2(a, b);
  } else {
    const T v[2] = {from_f<T>(a), from_f<T>(b)};
    *reinterpret_cast<uint32_t*>(y) = *reinterpret_cast<const uint32_t*>(v);
  }
}

// 3xFP16 (the forward's kH3, the weight gradient's MODE 3). fp16 keeps 11
// significant bits, as TF32 does, but only the exponents -24..15, so each
// operand is first scaled by a power of two that puts its largest finite
// magnitude in [2^14, 2^15) (fp16_exp; hi never rounds past 2^15 < 65504;
// the weight gradient aims one binade lower, see its kernel); values within
// 2^-16 of that largest one keep the full 22 bits of hi + lo, smaller ones
// an absolute error of at most 2^-25 in the scaled units (2^-39 of the
// largest).
// 2^e for e in [-126, 127]
__device__ __forceinline__ float pow2f(int e) { return __int_as_float((e + 127) << 23); }
// the scale exponent for a largest finite magnitude m (any for m = 0)
__device__ __forceinline__ int fp16_exp(float m) { return m > 0.f ? min(max(14 - ilogbf(m), -126), 127) : 0; }
// m grown by |x| unless x is Inf or NaN (those reach the outputs unscaled)
__device__ __forceinline__ float max_finite_abs(float m, float x) {
  const float a = fabsf(x);
  return a <= 3.402823466e38f ? fmaxf(m, a) : m;
}
// m grown by the magnitudes of v's four values (fmaxf skips NaN, not Inf),
// and by their finite ones only
__device__ __forceinline__ float max_abs4(float m, float4 v) {
  return fmaxf(fmaxf(m, fmaxf(fabsf(v.x), fabsf(v.y))), fmaxf(fabsf(v.z), fabsf(v.w)));
}
__device__ __forceinline__ float max_finite_abs4(float m, float4 v) {
  return max_finite_abs(max_finite_abs(max_finite_abs(max_finite_abs(m, v.x), v.y), v.z), v.w);
}
// (f0, f1) -> hi = fp16x2(f0, f1) (f0 in the low half), lo = fp16x2 of the
// remainders, which are exact in fp32
__device__ __forceinline__ void split_fp16x2(float f0, float f1, uint32_t& hi, uint32_t& lo) {
  const __half2 h = __floats2half2_rn(f0, f1);
  const float2 hf = __half22float2(h);
  const __half2 l = __floats2half2_rn(f0 - hf.x, f1 - hf.y);
  hi = *reinterpret_cast<const uint32_t*>(&h);
  lo = *reinterpret_cast<const uint32_t*>(&l);
}
// Four fp32 values scaled by s, each replaced by the word of its fp16 parts:
// hi in the low half, lo in the high half
__device__ __forceinline__ uint4 split_fp16_words(float4 u, float s) {
  uint32_t h0, l0, h1, l1;
  split_fp16x2(s * u.x, s * u.y, h0, l0);
  split_fp16x2(s * u.z, s * u.w, h1, l1);
  return make_uint4(__byte_perm(h0, l0, 0x5410), __byte_perm(h0, l0, 0x7632), __byte_perm(h1, l1, 0x5410),
                    __byte_perm(h1, l1, 0x7632));
}
// The largest m over the block's NTHR threads; red holds NTHR / 32 floats and
// must not be written again before a later barrier.
template <int NTHR>
__device__ __forceinline__ float block_max(float m, float* red) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
  if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = m;
  __syncthreads();
  m = red[0];
#pragma unroll
  for (int i = 1; i < NTHR / 32; ++i) m = fmaxf(m, red[i]);
  return m;
}

}  // namespace alexop::cuda
