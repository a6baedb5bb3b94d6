#!/usr/bin/env bash
# Everything the GPU machine checks, in one pass: build, the whole test suite,
# compute-sanitizer on a small shape, the demo and the benchmark. Logs go to
# $OUT (default gpu_logs/); a short summary is printed last. BENCH=0 leaves
# the benchmark out (the whole pass can outlast a 10-minute device call).
#   bash scripts/gpu_check.sh [bench args...]
set -uo pipefail
OUT="${OUT:-gpu_logs}"
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
if ls .whl/*.whl > /dev/null 2>&1; then python3 -m pip install -q --no-index --no-deps .whl/*.whl; fi
# Hopper's code and compute_80 PTX (the full default list takes longer and adds
# nothing this GPU runs).
export TORCH_CUDA_ARCH_LIST="${TORCH_CUDA_ARCH_LIST_GPU_CHECK:-8.0+PTX;9.0a}"
MAX_JOBS="${MAX_JOBS:-16}" python3 -m pip install -q --no-build-isolation --no-deps -e . > /tmp/alexop_build.log 2>&1 \
  || { cp /tmp/alexop_build.log "$OUT/build.log"; tail -40 "$OUT/build.log"; exit 1; }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader

# A per-test limit (where pytest-timeout is installed) names a hung test
# instead of the whole run being cut; 16 workers where pytest-xdist is
# installed; the slowest tests are listed. Every test, the slow ones too
# (`-m "not slow"` leaves out the training runs, AOTInductor and C++ builds).
per_test=$(python3 -c "import pytest_timeout" 2>/dev/null && echo "--timeout 300")
workers=$(python3 -c "import xdist" 2>/dev/null && echo "-n 16")
timeout 540 python3 -m pytest tests -q -rs -p no:benchmark --durations=10 $workers $per_test ${PYTEST_ARGS:-} \
  > "$OUT/tests.log" 2>&1
echo "tests rc=$?" >> "$OUT/summary.txt"
# The CUDA kernel tests again, the kernels chosen as on an A100 (the mma.sync
# ones). The PTX path a newer GPU takes is tested with a PTX-only build
# instead (docs/design.md, "Builds").
ALEXOP_FORCE_SM80=1 timeout 300 python3 -m pytest tests/test_cuda_kernels.py tests/test_every_shape.py \
  tests/test_nonfinite.py -q -p no:benchmark -m "not slow" $workers > "$OUT/tests_sm80.log" 2>&1
echo "tests with ALEXOP_FORCE_SM80=1 rc=$? $(tail -1 "$OUT/tests_sm80.log")" >> "$OUT/summary.txt"
# The kernels an RTX 5090 (sm_120, 99 KB of shared memory a block) and a B200 (sm_100) would time
# against cuDNN, run as the guess on this GPU: the accuracy tests only (the name tables are
# Hopper's and the A100's).
for sm in 120 100; do
  ALEXOP_FORCE_SM=$sm timeout 300 python3 -m pytest tests/test_every_shape.py tests/test_nonfinite.py \
    tests/test_forward.py tests/test_backward.py -k "float64 or nonfinite or slices_from" -q -p no:benchmark \
    -m "not slow" $workers > "$OUT/tests_sm$sm.log" 2>&1
  echo "accuracy tests with ALEXOP_FORCE_SM=$sm rc=$? $(tail -1 "$OUT/tests_sm$sm.log")" >> "$OUT/summary.txt"
done

small='import torch, alexop
x = torch.rand(2, 3, 67, 59, device="cuda"); w = torch.rand(96, 3, 11, 11, device="cuda"); b = torch.rand(96, device="cuda")
for dt in (torch.float32, torch.bfloat16):
    y = alexop.conv11s4(x.to(dt), w.to(dt), b.to(dt))
    torch.ops.alexop.conv11s4_backward_weight(torch.randn_like(y), x.to(dt), 2, True)
    torch.ops.alexop.conv11s4_backward_input(torch.randn_like(y), w.to(dt), list(x.shape), 2)
    # the 16-bit wgmma weight gradient with its register gather (small batches, even width)
    torch.ops.alexop.conv11s4_backward_weight(torch.randn(2, 96, 55, 55, device="cuda", dtype=dt), torch.rand(2, 3, 224, 224, device="cuda", dtype=dt), 2, True)
    # and on phase planes (4 tiles of 4 output rows an SM or more), 96 and 64 filters
    torch.ops.alexop.conv11s4_backward_weight(torch.randn(40, 96, 55, 55, device="cuda", dtype=dt), torch.rand(40, 3, 224, 224, device="cuda", dtype=dt), 2, True)
    torch.ops.alexop.conv11s4_backward_weight(torch.randn(44, 64, 49, 52, device="cuda", dtype=dt), torch.rand(44, 3, 200, 214, device="cuda", dtype=dt), 2, True)
    # the 16-bit forward on phase planes from one 192-pixel tile per SM (batch 8 at 224x224), with
    # its store warpgroup: NCHW and channels_last (by unit types) copies, 96 and 64 channel slots
    alexop.conv11s4(torch.rand(8, 3, 224, 224, device="cuda", dtype=dt), w.to(dt), b.to(dt))
    alexop.conv11s4(torch.rand(8, 3, 224, 224, device="cuda", dtype=dt).to(memory_format=torch.channels_last), w[:64].to(dt), b[:64].to(dt))
    # other widths stage their outputs for store warps from 2 tiles per SM: the space-to-depth
    # kernel for even padding (98x130: 31 outputs wide), the gather kernel for odd padding
    alexop.conv11s4(torch.rand(96, 3, 98, 130, device="cuda", dtype=dt), w.to(dt), b.to(dt))
    alexop.conv11s4(torch.rand(24, 3, 224, 224, device="cuda", dtype=dt), w.to(dt), b.to(dt), 1)
    # the tensor-core input gradient at batch 8 (and at batch 2 above)
    torch.ops.alexop.conv11s4_backward_input(torch.randn(8, 96, 55, 55, device="cuda", dtype=dt), w.to(dt), [8, 3, 224, 224], 2)
# the fp32-accurate Hopper forward (3xFP16) from 36 tiles (batch 3 at 224x224), both layouts, 64 and 96 filters
alexop.conv11s4(torch.rand(3, 3, 224, 224, device="cuda"), w, b)
alexop.conv11s4(torch.rand(3, 3, 224, 224, device="cuda").to(memory_format=torch.channels_last), w[:64], b[:64])
# the fp32-accurate Hopper weight gradient (3xFP16; also run above): channels_last with 64 filters, and
# rows growing over six decades, which start new runs at new scales
wg = torch.ops.alexop.conv11s4_backward_weight
wg(torch.randn(2, 64, 55, 55, device="cuda"), torch.rand(2, 3, 224, 224, device="cuda").to(memory_format=torch.channels_last), 2, True)
wg(torch.randn(2, 96, 55, 55, device="cuda"), torch.rand(2, 3, 224, 224, device="cuda") * 10 ** torch.linspace(-3, 3, 224, device="cuda").view(224, 1), 2, True)
# the fp32-accurate Hopper input gradient (3xFP16; also run above at batch 8): 64 filters at 227 without
# padding, and 40 filters on a 30x300 image (two bands of columns) with padding 5 (halo rows from dy)
dg = torch.ops.alexop.conv11s4_backward_input
dg(torch.randn(6, 64, 55, 55, device="cuda"), w[:64].contiguous(), [6, 3, 227, 227], 0)
dg(torch.randn(24, 40, 8, 75, device="cuda"), w[:40].contiguous(), [24, 3, 30, 300], 5)
# the TF32 forward on phase planes from one 192-pixel tile per SM (batch 8 at 224x224): 8-byte copies
# (NCHW; channels_last by unit types), 4-byte ones (227 without padding: odd width, both layouts),
# 96 and 64 channel slots
torch.set_float32_matmul_precision("medium")
alexop.conv11s4(torch.rand(8, 3, 224, 224, device="cuda"), w, b)
alexop.conv11s4(torch.rand(8, 3, 224, 224, device="cuda").to(memory_format=torch.channels_last), w[:64], b[:64])
alexop.conv11s4(torch.rand(8, 3, 227, 227, device="cuda"), w[:72], None, 0)
alexop.conv11s4(torch.rand(8, 3, 227, 227, device="cuda").to(memory_format=torch.channels_last), w, b, 0)
torch.cuda.synchronize(); print("ok")'
for tool in memcheck racecheck; do
  timeout 240 compute-sanitizer --tool "$tool" --error-exitcode 9 python3 -c "$small" >> "$OUT/sanitizer.log" 2>&1
  echo "compute-sanitizer $tool rc=$? $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$OUT/sanitizer.log" | tail -1)" >> "$OUT/summary.txt"
done

timeout 120 python3 scripts/demo.py --batch 64 > "$OUT/demo.log" 2>&1
echo "demo rc=$?" >> "$OUT/summary.txt"

if [ "${BENCH:-1}" != 0 ]; then
  timeout 300 python3 scripts/bench.py --out "$OUT" "$@" > "$OUT/bench.log" 2>&1
  echo "bench rc=$?" >> "$OUT/summary.txt"
fi

grep -E "^(FAILED|ERROR)" "$OUT/tests.log"; tail -3 "$OUT/tests.log"; tail -8 "$OUT/demo.log"
grep -s "median ms" "$OUT/bench.log"; grep -sE "^ 256  96" "$OUT/bench.log"; cat "$OUT/summary.txt"
