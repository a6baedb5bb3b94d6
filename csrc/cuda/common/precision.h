#pragma once
// Precision: what a float32 caller allows (Fp32Math).

namespace alexop::cuda {

// How a float32 problem may use the tensor cores, from PyTorch's float32
// matmul precision. Ignored for half types.
enum class Fp32Math {
  kAccurate,  // "highest": the error of a plain fp32 computation (3xTF32)
  kBf16x3,    // "high": each operand as a sum of two bf16 (about 16 bits)
  kTf32,      // "medium": operands rounded to TF32 (10 bits)
};

}  // namespace alexop::cuda
