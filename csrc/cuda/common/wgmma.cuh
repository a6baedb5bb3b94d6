#pragma once
// Hopper (sm_90a) wgmma building blocks shared by the forward and both
// gradients: the register-A forms D += A * B (B in shared memory through a
// descriptor) for the widths the kernels use, 16-bit and tf32 forms with A in
// shared memory too (the fp32-accurate input gradient, the plane forwards) and
// the fences around them (device.h tells whether a device runs this code).
// The device code exists only in the sm_90a pass (__CUDA_ARCH_FEAT_SM90_ALL);
// kernels that use it compile empty elsewhere and are never launched there.

#include "ptx.cuh"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>
#include <utility>

namespace alexop::cuda {

// A channels_last output's staged row (stage_rows kPixels): one pixel's 8
// nt8 channels and 8 more, an odd number of 16-byte units (stmatrix and the
// 16-byte read-back free of bank conflicts).
__host__ __device__ constexpr int staged_pixel_row(int nt8) { return 8 * nt8 + 8; }

// Bytes of a staged epilogue's rows for a tile of mt pixels, either layout:
// an NCHW output's [channel][pixel] rows of mt + 8 pixels (an odd number of
// 16-byte units, for the same reason), a channels_last one's
// [pixel][channel] rows of staged_pixel_row.
__host__ __device__ constexpr int staged_bytes(int nt8, int mt, int elem_bytes) {
  const int nchw = 8 * nt8 * (mt + 8), nhwc = mt * staged_pixel_row(nt8);
  return elem_bytes * (nchw > nhwc ? nchw : nhwc);
}

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
// wgmma with A from registers, B by descriptor, D += A * B (scale-d = 1).
// The (width, type) forms differ only in the instruction name and the
// operand lists, spelled out once per width below: the output registers,
// A's four registers, the descriptor and the scale-d predicate operand.
#define ALEXOP_ACC24 "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), \
  "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), \
  "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), \
  "+f"(d[23])
#define ALEXOP_ACC32 ALEXOP_ACC24, "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), \
  "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
#define ALEXOP_ACC48 ALEXOP_ACC32, "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), \
  "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), \
  "+f"(d[45]), "+f"(d[46]), "+f"(d[47])
#define ALEXOP_ACC64 ALEXOP_ACC48, "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), \
  "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), \
  "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
#define ALEXOP_N48                                                                        \
  "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, " \
  "%16, %17, %18, %19, %20, %21, %22, %23", \
  "%24, %25, %26, %27", "%28", "%29", ALEXOP_ACC24
#define ALEXOP_N64                                                                        \
  "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, " \
  "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31", \
  "%32, %33, %34, %35", "%36", "%37", ALEXOP_ACC32
#define ALEXOP_N96                                                                        \
  "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, " \
  "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, " \
  "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47", \
  "%48, %49, %50, %51", "%52", "%53", ALEXOP_ACC48
#define ALEXOP_N128                                                                        \
  "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, " \
  "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, " \
  "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, " \
  "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63", \
  "%64, %65, %66, %67", "%68", "%69", ALEXOP_ACC64
#define ALEXOP_WGMMA_RS(INSTR, TAIL, ...) ALEXOP_WGMMA_RS_I(INSTR, TAIL, __VA_ARGS__)
#define ALEXOP_WGMMA_RS_I(INSTR, TAIL, REGS, AREGS, DESC, PRED, ...)                     \
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, " PRED ", 0;\n" INSTR " {" REGS "}, "    \
               "{" AREGS "}, " DESC ", p, 1, 1" TAIL ";\n}\n"                            \
               : __VA_ARGS__                                                            \
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc), "r"(1))
// tf32 has no transpose flag for B; bf16/fp16 pass 0 (K-major B).
#define ALEXOP_WGMMA_TYPES(MN, ...)                                                          \
  if constexpr (std::is_same_v<TA, float>) {                                                \
    ALEXOP_WGMMA_RS("wgmma.mma_async.sync.aligned." MN "k8.f32.tf32.tf32", "", __VA_ARGS__); \
  } else if constexpr (std::is_same_v<TA, __nv_bfloat16>) {                                 \
    ALEXOP_WGMMA_RS("wgmma.mma_async.sync.aligned." MN "k16.f32.bf16.bf16", ", 0", __VA_ARGS__); \
  } else {                                                                                  \
    ALEXOP_WGMMA_RS("wgmma.mma_async.sync.aligned." MN "k16.f32.f16.f16", ", 0", __VA_ARGS__); \
  }

// d (m64 x 8 NT8, fp32) += a (this warp's 16 rows, mma.sync A fragment
// order) * B (descriptor); NT8 = 6, 8, 12 or 16.
template <typename TA, int NT8>
__device__ __forceinline__ void gmma_rs(float* d, const uint32_t* a, uint64_t desc) {
  if constexpr (NT8 == 6) {
    ALEXOP_WGMMA_TYPES("m64n48", ALEXOP_N48)
  } else if constexpr (NT8 == 8) {
    ALEXOP_WGMMA_TYPES("m64n64", ALEXOP_N64)
  } else if constexpr (NT8 == 12) {
    ALEXOP_WGMMA_TYPES("m64n96", ALEXOP_N96)
  } else {
    ALEXOP_WGMMA_TYPES("m64n128", ALEXOP_N128)
  }
}
#undef ALEXOP_WGMMA_TYPES
#undef ALEXOP_WGMMA_RS_I
#undef ALEXOP_WGMMA_RS
#undef ALEXOP_N128
#undef ALEXOP_N96
#undef ALEXOP_N64
#undef ALEXOP_N48

// wgmma with both operands in shared memory (descriptors), D = A * B when
// scale_d is 0, else D += A * B: T = __half or __nv_bfloat16 (k16; NT8 = 6,
// 8 or 12; K-major, hence the two transpose flags 0) or float for tf32 (k8;
// NT8 = 8 or 12; always K-major, no flags).
#define ALEXOP_SS48 \
  "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, " \
  "%16, %17, %18, %19, %20, %21, %22, %23", "%24", "%25", "%26", ALEXOP_ACC24
#define ALEXOP_SS64 \
  "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, " \
  "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31", "%32", "%33", "%34", \
  ALEXOP_ACC32
#define ALEXOP_SS96 \
  "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, " \
  "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, " \
  "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47", "%48", "%49", "%50", \
  ALEXOP_ACC48
#define ALEXOP_WGMMA_SS(INSTR, TAIL, ...) ALEXOP_WGMMA_SS_I(INSTR, TAIL, __VA_ARGS__)
#define ALEXOP_WGMMA_SS_I(INSTR, TAIL, REGS, ADESC, BDESC, PRED, ...)                             \
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, " PRED ", 0;\n" INSTR " {" REGS "}, " ADESC ", " \
               BDESC ", p, 1, 1" TAIL ";\n}\n"                                                     \
               : __VA_ARGS__                                                                     \
               : "l"(desc_a), "l"(desc_b), "r"(scale_d))
#define ALEXOP_WGMMA_SS16(MN, ...)                                                                  \
  if constexpr (std::is_same_v<T, __half>) {                                                        \
    ALEXOP_WGMMA_SS("wgmma.mma_async.sync.aligned." MN "k16.f32.f16.f16", ", 0, 0", __VA_ARGS__);   \
  } else {                                                                                          \
    ALEXOP_WGMMA_SS("wgmma.mma_async.sync.aligned." MN "k16.f32.bf16.bf16", ", 0, 0", __VA_ARGS__); \
  }
template <typename T, int NT8>
__device__ __forceinline__ void gmma_ss(float* d, uint64_t desc_a, uint64_t desc_b, int scale_d) {
  static_assert(std::is_same_v<T, __half> || std::is_same_v<T, __nv_bfloat16> || std::is_same_v<T, float>,
                "fp16, bf16 or tf32 (float) operands");
  if constexpr (std::is_same_v<T, float>) {
    static_assert(NT8 == 8 || NT8 == 12, "tf32: m64n64 or m64n96");
    if constexpr (NT8 == 8) {
      ALEXOP_WGMMA_SS("wgmma.mma_async.sync.aligned.m64n64k8.f32.tf32.tf32", "", ALEXOP_SS64);
    } else {
      ALEXOP_WGMMA_SS("wgmma.mma_async.sync.aligned.m64n96k8.f32.tf32.tf32", "", ALEXOP_SS96);
    }
  } else if constexpr (NT8 == 6) {
    ALEXOP_WGMMA_SS16("m64n48", ALEXOP_SS48)
  } else if constexpr (NT8 == 8) {
    ALEXOP_WGMMA_SS16("m64n64", ALEXOP_SS64)
  } else {
    static_assert(NT8 == 12, "16-bit: m64n48, m64n64 or m64n96");
    ALEXOP_WGMMA_SS16("m64n96", ALEXOP_SS96)
  }
}
#undef ALEXOP_WGMMA_SS16
#undef ALEXOP_WGMMA_SS_I
#undef ALEXOP_WGMMA_SS
#undef ALEXOP_SS96
#undef ALEXOP_SS64
#undef ALEXOP_SS48

// wgmma with both operands in shared memory, A K-major and B MN-major (the
// transpose flag for B: 8 consecutive n values form a 16-byte core-matrix
// row), D = A * B where scale_d is 0, else D += A * B; 16-bit operands (T =
// __half or __nv_bfloat16), N = 8 or 48 CH (the planes' weight gradient of CH
// = 1 to 3 input channels). The
// descriptors come as their low words (start address and LBO, see
// gmma_desc) and compile-time high words (SBO), so that a kernel whose
// registers are nearly all accumulators keeps one 32-bit register per
// descriptor. ALEXOP_TB: the instruction for operand type TY, with the
// output list REGS and the operand numbers of the descriptors' low words
// (IA, IB), high words (HA, HB) and scale-d (IS).
#define ALEXOP_TB(MN, TY, REGS, IA, IB, HA, HB, IS)                                            \
  "{\n.reg .pred p;\n.reg .b64 da, db;\nsetp.ne.b32 p, %" IS ", 0;\ncvt.u64.u32 da, %" IA   \
  ";\nor.b64 da, da, %" HA ";\ncvt.u64.u32 db, %" IB ";\nor.b64 db, db, %" HB                \
  ";\nwgmma.mma_async.sync.aligned." MN "k16.f32." TY "." TY " " REGS ", da, db, p, 1, 1, 0, 1;\n}\n"
#define ALEXOP_R48 \
  "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, " \
  "%12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23}"
#define ALEXOP_R96 \
  "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, " \
  "%12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, " \
  "%24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, " \
  "%36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47}"
#define ALEXOP_R144 \
  "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, " \
  "%12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, " \
  "%24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, " \
  "%36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, " \
  "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, " \
  "%60, %61, %62, %63, %64, %65, %66, %67, %68, %69, %70, %71}"
#define ALEXOP_A144 ALEXOP_ACC64, "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), \
  "+f"(d[69]), "+f"(d[70]), "+f"(d[71])
template <typename T, int N, uint32_t kSboA, uint32_t kSboB>
__device__ __forceinline__ void gmma_ss_tb(float* d, uint32_t desc_a, uint32_t desc_b, int scale_d) {
  static_assert(std::is_same_v<T, __half> || std::is_same_v<T, __nv_bfloat16>, "fp16 or bf16 operands");
  static_assert(N == 8 || N == 48 || N == 96 || N == 144, "m64n8, m64n48, m64n96 or m64n144");
  constexpr uint64_t kHa = (uint64_t)((kSboA >> 4) & 0x3FFF) << 32, kHb = (uint64_t)((kSboB >> 4) & 0x3FFF) << 32;
#define ALEXOP_N8(TY)                                                                              \
  asm volatile(ALEXOP_TB("m64n8", TY, "{%0, %1, %2, %3}", "4", "5", "6", "7", "8")                 \
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])                                    \
               : "r"(desc_a), "r"(desc_b), "n"(kHa), "n"(kHb), "r"(scale_d))
#define ALEXOP_N48(TY)                                                                             \
  asm volatile(ALEXOP_TB("m64n48", TY, ALEXOP_R48, "24", "25", "26", "27", "28")                   \
               : ALEXOP_ACC24                                                                      \
               : "r"(desc_a), "r"(desc_b), "n"(kHa), "n"(kHb), "r"(scale_d))
#define ALEXOP_N96(TY)                                                                             \
  asm volatile(ALEXOP_TB("m64n96", TY, ALEXOP_R96, "48", "49", "50", "51", "52")                   \
               : ALEXOP_ACC48                                                                      \
               : "r"(desc_a), "r"(desc_b), "n"(kHa), "n"(kHb), "r"(scale_d))
#define ALEXOP_N144(TY)                                                                            \
  asm volatile(ALEXOP_TB("m64n144", TY, ALEXOP_R144, "72", "73", "74", "75", "76")                 \
               : ALEXOP_A144                                                                       \
               : "r"(desc_a), "r"(desc_b), "n"(kHa), "n"(kHb), "r"(scale_d))
  constexpr bool kHalf = std::is_same_v<T, __half>;
  if constexpr (N == 8) {
    if constexpr (kHalf) ALEXOP_N8("f16"); else ALEXOP_N8("bf16");
  } else if constexpr (N == 48) {
    if constexpr (kHalf) ALEXOP_N48("f16"); else ALEXOP_N48("bf16");
  } else if constexpr (N == 96) {
    if constexpr (kHalf) ALEXOP_N96("f16"); else ALEXOP_N96("bf16");
  } else {
    if constexpr (kHalf) ALEXOP_N144("f16"); else ALEXOP_N144("bf16");
  }
#undef ALEXOP_N144
#undef ALEXOP_N96
#undef ALEXOP_N48
#undef ALEXOP_N8
}
#undef ALEXOP_A144
#undef ALEXOP_R144
#undef ALEXOP_R96
#undef ALEXOP_R48
#undef ALEXOP_TB
#undef ALEXOP_ACC64
#undef ALEXOP_ACC48
#undef ALEXOP_ACC32
#undef ALEXOP_ACC24

// f(integral_constant<int, i>) for i = 0 .. N - 1: a loop whose index is a
// compile-time constant in its body (the plane kernels' k steps, so that
// their descriptor offsets are constants too).
template <typename F, int... I>
__device__ __forceinline__ void static_for_seq(F&& f, std::integer_sequence<int, I...>) {
  (f(std::integral_constant<int, I>{}), ...);
}
template <int N, typename F>
__device__ __forceinline__ void static_for(F&& f) {
  static_for_seq(f, std::make_integer_sequence<int, N>{});
}

__device__ __forceinline__ void gmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void gmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int N> __device__ __forceinline__ void gmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}
// Pins accumulator accesses on their side of a wgmma fence / wait.
__device__ __forceinline__ void pin(float& r) { asm volatile("" : "+f"(r)::"memory"); }
// Generic-proxy writes (cp.async, st.shared) made visible to the tensor cores' async proxy.
__device__ __forceinline__ void fence_proxy_async() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }
// mbarrier (shared memory, CTA scope): init, an arrival by the threads
// where pred holds (release), and a spin on try_wait.parity (acquire) until
// the phase of the given parity has completed.
__device__ __forceinline__ void mbar_init(uint32_t bar, int count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}
// The arrival is predicated rather than branched around: a divergent branch
// between wgmmas makes ptxas serialize them.
__device__ __forceinline__ void mbar_arrive_if(uint32_t bar, bool pred) {
  asm volatile(
      "{\n.reg .pred p;\n.reg .b64 st;\nsetp.ne.b32 p, %1, 0;\n"
      "@p mbarrier.arrive.shared::cta.b64 st, [%0];\n}\n" ::"r"(bar),
      "r"((int)pred)
      : "memory");
}
__device__ __forceinline__ void mbar_wait(uint32_t bar, uint32_t parity) {
  asm volatile(
      "{\n.reg .pred done;\nWAIT:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
      "@!done bra WAIT;\n}\n" ::"r"(bar),
      "r"(parity)
      : "memory");
}
// Descriptor of an operand at shared address saddr in the canonical K-major,
// no-swizzle layout: 8 x 16-byte core matrices (8 rows of m or n, 8 halves
// of k each), lbo bytes apart along k and sbo bytes apart along m / n.
// Adding or subtracting an integer moves the start by 16 bytes per unit.
__device__ __forceinline__ uint64_t gmma_desc(uint32_t saddr, uint32_t lbo, uint32_t sbo) {
  return (uint64_t)((saddr >> 4) & 0x3FFF) | ((uint64_t)((lbo >> 4) & 0x3FFF) << 16) |
         ((uint64_t)((sbo >> 4) & 0x3FFF) << 32);
}
// The weights' layout in the kernels: lbo 128, sbo 256.
__device__ __forceinline__ uint64_t gmma_desc(uint32_t saddr) { return gmma_desc(saddr, 128, 256); }
// desc moved by `bytes` (a multiple of 16, staying in shared memory): the
// start address never carries out of the low word, so a 32-bit add of it
// does, and the high word stays the constant it was; a 64-bit add costs a
// carry chain and a second register move to the uniform datapath each time.
__device__ __forceinline__ uint64_t gmma_desc_plus(uint64_t desc, uint32_t bytes) {
  return (desc & ~0xFFFFFFFFull) | (uint32_t)((uint32_t)desc + (bytes >> 4));
}

// stmatrix: four 8 x 8 b16 matrices, transposed or as they are, to shared
// memory (lane l gives the address of row l & 7 of matrix l >> 3).
__device__ __forceinline__ void stmatrix_x4_trans(uint32_t saddr, uint32_t r0, uint32_t r1, uint32_t r2,
                                                  uint32_t r3) {
  asm volatile("stmatrix.sync.aligned.m8n8.x4.trans.shared.b16 [%0], {%1, %2, %3, %4};\n" ::"r"(saddr),
               "r"(r0), "r"(r1), "r"(r2), "r"(r3)
               : "memory");
}
__device__ __forceinline__ void stmatrix_x4(uint32_t saddr, uint32_t r0, uint32_t r1, uint32_t r2, uint32_t r3) {
  asm volatile("stmatrix.sync.aligned.m8n8.x4.shared.b16 [%0], {%1, %2, %3, %4};\n" ::"r"(saddr), "r"(r0), "r"(r1),
               "r"(r2), "r"(r3)
               : "memory");
}

// The MMA warps' half of a staged 16-bit epilogue (the forwards' store
// warpgroups): this warp's 16 rows of an m64 x 8 NT8 accumulator (pixels
// px..px+15 of the tile), bias added and rounded, to the staging rows as
// [channel][pixel], ls elements apart, or (kPixels) as [pixel][channel],
// a channels_last output's order (store_staged_pixels).
template <typename T, int NT8, bool kPixels = false>
__device__ __forceinline__ void stage_rows(const float* acc, const float* sbias, unsigned char* stage, int ls,
                                           int px, int lane) {
  const int t = lane & 3, mi = lane >> 3, r = lane & 7;
  // this lane's row address: block mi of an x4 = (n8 tile 2jq + mi / 2, pixels 8 (mi & 1) + 0..7), the
  // same registers either way
  const int row = kPixels ? px + 8 * (mi & 1) + r : 8 * (mi >> 1) + r;
  const int col = kPixels ? 8 * (mi >> 1) : px + 8 * (mi & 1);
  const uint32_t sa = smem_u32(reinterpret_cast<uint16_t*>(stage) + (size_t)row * ls + col);
#pragma unroll
  for (int jq = 0; jq < NT8 / 2; ++jq) {
    uint32_t rr[4];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int j = 2 * jq + h;
      const float2 bv = *reinterpret_cast<const float2*>(sbias + j * 8 + 2 * t);
      rr[2 * h] = pack2(from_f<T>(acc[j * 4] + bv.x), from_f<T>(acc[j * 4 + 1] + bv.y));
      rr[2 * h + 1] = pack2(from_f<T>(acc[j * 4 + 2] + bv.x), from_f<T>(acc[j * 4 + 3] + bv.y));
    }
    if constexpr (kPixels)
      stmatrix_x4(sa + jq * 32, rr[0], rr[1], rr[2], rr[3]);
    else
      stmatrix_x4_trans(sa + jq * 16 * ls * 2, rr[0], rr[1], rr[2], rr[3]);
  }
}

// stage_rows in the output's order: [pixel][channel] rows for a
// channels_last output (pixels), else [channel][pixel] rows ls apart.
template <typename T, int NT8>
__device__ __forceinline__ void stage_tile(bool pixels, const float* acc, const float* sbias, unsigned char* stage,
                                           int ls, int px, int lane) {
  if (pixels)
    stage_rows<T, NT8, true>(acc, sbias, stage, staged_pixel_row(NT8), px, lane);
  else
    stage_rows<T, NT8>(acc, sbias, stage, ls, px, lane);
}

// The widest piece (8, 4, 2 or 1 elements) of a pixel's channels that a
// channels_last store may write whole: nch channels a pixel, pixels stride
// elements apart, the first pixel's channels at y0.
__device__ __forceinline__ int pixel_piece(int nch, int64_t stride, const uint16_t* y0) {
  const uint64_t bits = (uint64_t)(nch | stride) * 2 | reinterpret_cast<uintptr_t>(y0);
  return bits % 16 == 0 ? 8 : bits % 8 == 0 ? 4 : bits % 4 == 0 ? 2 : 1;
}

// store_staged_pixels for pieces of E elements.
template <int E, typename PixelOffset>
__device__ __forceinline__ void store_pixel_pieces(const uint16_t* st, int ls, int nch, int npix, uint16_t* y,
                                                   PixelOffset pix, int t, int nthreads) {
  using V = std::conditional_t<E == 8, uint4,
                               std::conditional_t<E == 4, uint2, std::conditional_t<E == 2, uint32_t, uint16_t>>>;
  const int per = nch / E, total = npix * per;
  for (int k = t; k < total; k += nthreads) {
    const int i = k / per, c = E * (k - i * per);
    const int64_t o = pix(i);
    if (o >= 0) *reinterpret_cast<V*>(y + o + c) = *reinterpret_cast<const V*>(st + i * ls + c);
  }
}

// The store warps' half of a staged 16-bit epilogue for a channels_last
// output from [pixel][channel] rows (stage_rows kPixels: st[i * ls + c],
// tile pixel i < npix, channel c < nch, the rows 16-byte aligned): a
// pixel's channels are contiguous in y as in the rows, so consecutive
// threads copy consecutive pieces of a pixel's channels, then the next
// pixel's, and a warp writes whole sectors (ldmatrix transposes of
// [channel][pixel] rows left 4-byte stores, each sector half written).
// pix(i): the element offset in y of tile pixel i's first channel, or -1
// where the tile has no such pixel; piece: pixel_piece's. This thread is t
// of nthreads.
template <typename PixelOffset>
__device__ __forceinline__ void store_staged_pixels(const uint16_t* st, int ls, int nch, int npix, uint16_t* y,
                                                    PixelOffset pix, int piece, int t, int nthreads) {
  switch (piece) {
    case 8: return store_pixel_pieces<8>(st, ls, nch, npix, y, pix, t, nthreads);
    case 4: return store_pixel_pieces<4>(st, ls, nch, npix, y, pix, t, nthreads);
    case 2: return store_pixel_pieces<2>(st, ls, nch, npix, y, pix, t, nthreads);
    default: return store_pixel_pieces<1>(st, ls, nch, npix, y, pix, t, nthreads);
  }
}

#endif

}  // namespace alexop::cuda
