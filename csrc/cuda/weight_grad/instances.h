#pragma once
// Every instantiation of the weight-gradient launchers, as X-macro lists:
// the launch switch (launch.cu) and the files that instantiate them expand
// the same lists. MT: m16 tiles of output channels per CTA (2: K = 64, 3:
// K = 96, two CTAs a slice); NT8: n8 tiles of channels (8: 64, 12: 96).

// mma.sync, fp32: (MODE, MT)
#define ALEXOP_WGRAD_MMA_FP32(X) X(k3xTf32, 2) X(k3xTf32, 3) X(kTf32, 2) X(kTf32, 3)
// mma.sync, 16-bit (pairs and strided): (T, MT), T = at::BFloat16 or at::Half
#define ALEXOP_WGRAD_MMA_16(X, T) X(T, 2) X(T, 3)
// wgmma: (T, MODE, NT8, VEC, DYL), DYL a channels_last dy
#define ALEXOP_WGRAD_GMMA_FP32(X, DYL)                                                                      \
  X(float, k3xFp16, 8, false, DYL) X(float, k3xFp16, 8, true, DYL) X(float, k3xFp16, 12, false, DYL)        \
  X(float, k3xFp16, 12, true, DYL) X(float, kTf32, 8, false, DYL) X(float, kTf32, 8, true, DYL)             \
  X(float, kTf32, 12, false, DYL) X(float, kTf32, 12, true, DYL)
#define ALEXOP_WGRAD_GMMA_16(X, T, DYL) \
  X(T, k16, 8, false, DYL) X(T, k16, 8, true, DYL) X(T, k16, 12, false, DYL) X(T, k16, 12, true, DYL)
// phase planes: (T, NT8, CH, DYL), T = __nv_bfloat16 or __half, CH input
// channels, DYL a channels_last dy
#define ALEXOP_WGRAD_PLANES_DY(X, T, DYL) \
  X(T, 8, 1, DYL) X(T, 12, 1, DYL) X(T, 8, 2, DYL) X(T, 12, 2, DYL) X(T, 8, 3, DYL) X(T, 12, 3, DYL)
#define ALEXOP_WGRAD_PLANES(X, T) ALEXOP_WGRAD_PLANES_DY(X, T, false) ALEXOP_WGRAD_PLANES_DY(X, T, true)
