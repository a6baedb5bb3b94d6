"""The main job: AlexNet with conv1 on alexop, through every path PyTorch offers.

Takes torchvision's AlexNet (or, without torchvision, a small model with the same
conv1), converts conv1 with alexop.convert, runs it eagerly, under torch.compile,
exported (torch.export, saved and loaded) and scripted (TorchScript, saved and
loaded), on the GPU if there is one and on the CPU otherwise. Every output is
checked against the unconverted nn.Conv2d model run in float64; the table gives
each path's time for a whole forward pass of the model and its speedup over the
unconverted model in eager mode, and a last line times conv1 alone.

    python scripts/demo.py [--batch 8] [--device cuda|cpu]
"""

import argparse
import copy
import logging
import tempfile
import time
import warnings
from pathlib import Path

import torch
from torch import nn

import alexop

# Without a GPU, torch.compile's import of cpp_extension warns that no CUDA
# runtime is found: true, and nothing a user of this demo can act on.
logging.getLogger("torch.utils.cpp_extension").setLevel(logging.ERROR)
# The demo compares float32 paths at full float32 precision on purpose.
warnings.filterwarnings("ignore", message="TensorFloat32 tensor cores", category=UserWarning)


def alexnet() -> tuple[nn.Module, str]:
    try:
        from torchvision.models import alexnet as tv_alexnet
    except ImportError:
        # torchvision's conv1 and a small head: enough to show the swap.
        small = nn.Sequential(
            nn.Conv2d(3, 64, kernel_size=11, stride=4, padding=2),
            nn.ReLU(inplace=True),
            nn.MaxPool2d(kernel_size=3, stride=2),
            nn.AdaptiveAvgPool2d((6, 6)),
            nn.Flatten(),
            nn.Linear(64 * 36, 1000),
        )
        return small, "a small AlexNet-like model (torchvision is not installed)"
    return tv_alexnet(weights=None), "torchvision's AlexNet"


def timed(fn, x, device, reps):
    def sync():
        if device.type == "cuda":
            torch.cuda.synchronize(device)

    with torch.no_grad():
        out = fn(x)
        for _ in range(2):
            fn(x)
        sync()
        times = []
        for _ in range(reps):
            start = time.perf_counter()
            fn(x)
            sync()
            times.append(time.perf_counter() - start)
    return out, sorted(times)[len(times) // 2] * 1e3


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--reps", type=int, default=10)
    args = parser.parse_args()
    device = torch.device(args.device)

    torch.manual_seed(0)
    baseline, description = alexnet()
    baseline = baseline.eval().to(device)
    model = alexop.convert(copy.deepcopy(baseline))
    converted = [name for name, m in model.named_modules() if isinstance(m, alexop.Conv11s4)]
    print(f"alexop {alexop.__version__}, torch {torch.__version__}, device {device}"
          f"{' (' + torch.cuda.get_device_name(device) + ')' if device.type == 'cuda' else ''}")
    print(f"model: {description}; alexop.convert put these layers on alexop: {converted}")

    x = torch.rand(args.batch, 3, 224, 224, device=device)
    with torch.no_grad():
        want = copy.deepcopy(baseline).double()(x.double())

    baseline_name = "nn.Conv2d eager (baseline)"
    paths = {baseline_name: baseline, "alexop eager": model}
    paths["alexop torch.compile"] = torch.compile(model, fullgraph=True)
    with tempfile.TemporaryDirectory() as tmp, warnings.catch_warnings():
        # torch 2.14 marks TorchScript deprecated; it is shown here because
        # deployed models still use it, and alexop supports it.
        warnings.filterwarnings("ignore", category=FutureWarning, module=r"torch\.jit")
        # torch 2.11's .pt2 loader warns about its own read-only buffers.
        warnings.filterwarnings("ignore", message="The given buffer is not writable", category=UserWarning)
        batch = torch.export.Dim("batch", min=1, max=4096)
        exported = torch.export.export(model, (x,), dynamic_shapes=({0: batch},))
        torch.export.save(exported, Path(tmp) / "alexnet.pt2")
        paths["alexop torch.export (.pt2)"] = torch.export.load(Path(tmp) / "alexnet.pt2").module()
        torch.jit.script(model).save(str(Path(tmp) / "alexnet.ts"))
        paths["alexop TorchScript"] = torch.jit.load(str(Path(tmp) / "alexnet.ts"), map_location=device)

        rows = []
        failed = False
        for name, fn in paths.items():
            out, ms = timed(fn, x, device, args.reps)
            err = ((out.double() - want).norm() / want.norm()).item()
            ok = err <= 1e-3
            failed |= not ok
            rows.append((name, ms, err, "ok" if ok else "MISMATCH"))

    base_ms = rows[0][1]
    print(f"\nOne forward pass of the whole model, batch {args.batch}, 224x224, float32, median of {args.reps}.")
    print(f"Speedup is against the unconverted model in eager mode ({baseline_name}); the error is the")
    print("relative L2 distance of the model's output to the unconverted model's in float64.")
    print(f"{'path':<30} {'ms/forward':>10} {'speedup':>8} {'rel L2 err':>11}  check")
    for name, ms, err, status in rows:
        print(f"{name:<30} {ms:>10.2f} {base_ms / ms:>7.2f}x {err:>11.2e}  {status}")

    conv = next(m for m in baseline.modules() if isinstance(m, nn.Conv2d))
    _, conv_ms = timed(conv, x, device, args.reps)
    _, alexop_ms = timed(alexop.Conv11s4.from_conv2d(conv), x, device, args.reps)
    print(f"\nconv1 alone: nn.Conv2d {conv_ms:.2f} ms, alexop {alexop_ms:.2f} ms ({conv_ms / alexop_ms:.2f}x).")
    if alexop_ms > conv_ms:
        print(f"On this {device.type.upper()} alexop's conv1 is slower than PyTorch's own here: "
              "alexop.convert() does not pay off on this machine at this batch size.")
    elif rows[1][1] > base_ms:
        print(f"The converted model was not faster in this run although its conv1 is: conv1 is "
              f"{conv_ms / base_ms:.0%} of the model's time here, so the other layers and run-to-run noise "
              "decide; a larger --batch gives conv1 a larger share.")
    if failed:
        raise SystemExit("some path does not match nn.Conv2d")


if __name__ == "__main__":
    main()
