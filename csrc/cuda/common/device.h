#pragma once
// What the kernel choice needs to know of a device.

namespace alexop::cuda {

// True when `device` is sm_90 and this build carries sm_90a code (wgmma) for
// it. Cached per device; a function-attribute query, so safe under stream
// capture.
bool gmma_available(int device);

}  // namespace alexop::cuda
