#pragma once
// Every instantiation of the forward kernels' launchers, as X-macro lists:
// the launch switch (launch.cu) and the files that instantiate them expand
// the same lists, so a choice the switch can reach always links. Entries
// are the launchers' template arguments.

// mma.sync gather: (T, MODE, NT8, NBUF, GMMA, CPS, STAGED); fp32 one patch
// buffer (channel groups of 16, 32, 48 for the fp32-accurate split), 16-bit two.
#define ALEXOP_FWD_MMA_FP32(X)                                                                     \
  X(float, k3xTf32, 2, 1, false, 1, false) X(float, k3xTf32, 4, 1, false, 1, false)               \
  X(float, k3xTf32, 6, 1, false, 1, false) X(float, k3xTf32, 8, 1, false, 1, false)               \
  X(float, k3xTf32, 12, 1, false, 1, false) X(float, kBf16x3, 2, 1, false, 1, false)              \
  X(float, kBf16x3, 4, 1, false, 1, false) X(float, kBf16x3, 6, 1, false, 1, false)               \
  X(float, kBf16x3, 8, 1, false, 1, false) X(float, kBf16x3, 12, 1, false, 1, false)              \
  X(float, kTf32, 8, 1, false, 1, false) X(float, kTf32, 12, 1, false, 1, false)
#define ALEXOP_FWD_MMA_16(X, T)                                                                    \
  X(T, k16, 8, 2, false, 1, false) X(T, k16, 12, 2, false, 1, false) X(T, k16, 16, 2, false, 1, false) \
  X(T, k16Pairs, 8, 2, false, 1, false) X(T, k16Pairs, 12, 2, false, 1, false)                     \
  X(T, k16Pairs, 16, 2, false, 1, false)

// wgmma gather, float: TF32 and 3xFP16 one CTA of all channels, 3xTF32 in
// groups of 48.
#define ALEXOP_FWD_GMMA_FP32(X)                                                                    \
  X(float, kTf32, 8, 1, true, 1, false) X(float, kTf32, 12, 1, true, 1, false)                    \
  X(float, k3xFp16, 8, 1, true, 1, false) X(float, k3xFp16, 12, 1, true, 1, false)                \
  X(float, k3xTf32, 6, 1, true, 1, false)
// wgmma gather, 16-bit: staged (K <= 96) and two CTAs an SM.
#define ALEXOP_FWD_GMMA_16(X, T)                                                                   \
  X(T, k16, 8, 2, true, 1, true) X(T, k16, 12, 2, true, 1, true) X(T, k16Pairs, 8, 2, true, 1, true) \
  X(T, k16Pairs, 12, 2, true, 1, true) X(T, k16, 8, 1, true, 2, false) X(T, k16, 12, 1, true, 2, false) \
  X(T, k16, 16, 1, true, 2, false) X(T, k16Pairs, 8, 1, true, 2, false)                            \
  X(T, k16Pairs, 12, 1, true, 2, false) X(T, k16Pairs, 16, 1, true, 2, false)

// wgmma chunks (NCHW, more channels): TF32 and 3xFP16 groups of 64 | 96,
// 16-bit of 64 | 96 | 128, as the 3-channel kernels.
#define ALEXOP_FWD_CHUNKS_FP32(X)                                                                  \
  X(float, kTf32Chunks, 8, 2, true, 1, false) X(float, kTf32Chunks, 12, 2, true, 1, false)        \
  X(float, k3xFp16Chunks, 8, 2, true, 1, false) X(float, k3xFp16Chunks, 12, 2, true, 1, false)
#define ALEXOP_FWD_CHUNKS_16(X, T)                                                                 \
  X(T, k16Chunks, 8, 2, true, 1, false) X(T, k16Chunks, 12, 2, true, 1, false)                    \
  X(T, k16Chunks, 16, 2, true, 1, false)

// space-to-depth: (T, MODE, NT8)
#define ALEXOP_FWD_S2D(X, T) X(T, k16S2d, 8) X(T, k16S2d, 12) X(T, k16S2dNhwc, 8) X(T, k16S2dNhwc, 12)

// phase planes: (T, NT8, CH), CH the channel slots: 3 (for 1 to 3
// channels) or, 16-bit, 4 (in a file of its own)
#define ALEXOP_FWD_PLANES_TF32(X) X(float, 8, 3) X(float, 12, 3)
#define ALEXOP_FWD_PLANES_16(X, T) X(T, 8, 3) X(T, 12, 3)
#define ALEXOP_FWD_PLANES_16_4CH(X, T) X(T, 8, 4) X(T, 12, 4)
