#pragma once
// Precision: what a float32 caller allows (Fp32Math) and what a kernel's
// products compute (MathMode).

namespace alexop::cuda {

// How a float32 problem may use the tensor cores, from PyTorch's float32
// matmul precision. Ignored for half types.
enum class Fp32Math {
  kAccurate,  // "highest": the error of a plain fp32 computation (3xTF32)
  kBf16x3,    // "high": each operand as a sum of two bf16 (about 16 bits)
  kTf32,      // "medium": operands rounded to TF32 (10 bits)
};

// What a tensor-core kernel's products compute: the MODE template argument of
// every kernel family, in one numbering. From k16Pairs on they are modes of
// the forward's gather kernels (forward/gather.cuh): its 16-bit A layouts,
// and the channel-chunk reductions of more than 3 input channels.
enum MathMode : int {
  k3xTf32 = 0,     // fp32-accurate: TF32 big and small parts, three products
  kTf32 = 1,       // one TF32 product
  k16 = 2,         // bf16 / fp16 operands, fp32 accumulation
  k3xFp16 = 3,     // fp32-accurate: fp16 hi and lo parts scaled by powers of two
  kBf16x3 = 4,     // fp32 "high": bf16 hi and lo parts, three products
  k16Pairs = 5,    // 16-bit NCHW of even padding: s padded to 12, a k pair per patch word
  k16S2d = 6,      // 16-bit space-to-depth (4 x 4 blocks), NCHW
  k16S2dNhwc = 7,  // the same, channels_last
  kTf32Chunks = 8,  // any channel count, chunks of 1 channel (121 taps padded to 128), TF32
  k16Chunks = 9,    // the same, chunks of 2 channels, bf16 / fp16
  k3xFp16Chunks = 10,  // the same, chunks of 1 channel, fp32-accurate as k3xFp16
};

}  // namespace alexop::cuda
