#pragma once
// What the kernel choice needs to know of a device, as a plain description
// (the selectors are pure functions of it), and the queries that fill it.

#include <cstdint>
#include <string>

namespace alexop::cuda {

struct Device {
  int sm = 0;                 // compute capability, major * 10 + minor
  bool sm90a = false;         // an sm_90 device running this build's sm_90a code (wgmma)
  bool measured = false;      // an architecture the kernels were measured on (measured_architecture)
  int num_sms = 0;
  int64_t smem_optin = 0;     // shared memory a block may opt in to, bytes
  int64_t smem_per_sm = 0;    // shared memory of an SM
  int64_t smem_reserved = 0;  // shared memory the driver reserves per block
};

// The description of CUDA device `index`. In the environment (read once),
// for the tests: ALEXOP_FORCE_SM80=1 describes an sm_90 device as sm_80
// without wgmma, how they run the A100 kernels on Hopper;
// ALEXOP_FORCE_SM=<cc> (80, 86, 89, 100, 120) as that architecture, no
// wgmma and its shared memory (99 KB a block on sm_86, sm_89 and sm_120),
// the selectors choosing as there, but still `measured`: their choice runs
// as the guess (untimed in the tests) where there cuDNN would.
Device device(int index);

// The description of a GPU kind by name, as its device properties give it,
// for asking the selectors without one: "h100" and "h200" (sm_90 running
// this build's sm_90a code, 132 SMs, 227 KB of shared memory a block),
// "a100" (sm_80, 108 SMs, 163 KB), and architectures the kernels were not
// measured on: "l4" (sm_89, 58 SMs, 99 KB), "rtx4090" (sm_89, 128 SMs),
// "b200" (sm_100, 148 SMs, 227 KB), "rtx5090" (sm_120, 170 SMs, 99 KB).
// Throws on any other name.
Device named_device(const std::string& kind);

// alexop's tensor-core kernels need sm_80's cp.async and bf16 / TF32
// mma.sync, which Turing lacks (its problems go to cuDNN).
inline bool tensor_core_kernels(const Device& d) { return d.sm >= 80; }

// The kernels were measured against cuDNN on sm_80 (A100) and sm_90 (H100,
// H200): there the selectors' choice is the guess, timed against cuDNN on a
// problem's first call. On Ada and Blackwell cuDNN is the guess and alexop's
// choice the timed alternative: it runs only where a first call found it
// faster, never in deterministic mode.
inline bool measured_architecture(int sm) { return sm == 80 || sm == 90; }

// Of alexop's choice and cuDNN, timed against each other on a problem's first
// call, whether cuDNN is the guess (what runs untimed, and kernel_for names
// first): where the selector chose cuDNN, and on every architecture the
// kernels were not measured on.
inline bool cudnn_is_guess(const Device& d, bool chose_cudnn) { return chose_cudnn || !d.measured; }

// True when `device` is sm_90 and this build carries sm_90a code (wgmma) for
// it. Cached per device; a function-attribute query, so safe under stream
// capture.
bool gmma_available(int device);

// The largest power of two, up to 16, that divides the address: what the
// kernels' vector copies need of a pointer.
inline int alignment(const void* p) {
  const auto a = reinterpret_cast<uintptr_t>(p);
  return a % 16 == 0 ? 16 : a % 8 == 0 ? 8 : a % 4 == 0 ? 4 : a % 2 == 0 ? 2 : 1;
}

}  // namespace alexop::cuda
