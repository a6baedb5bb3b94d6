"""The main job: AlexNet with conv1 on alexop, through every path PyTorch offers.

Takes torchvision's AlexNet (or, without torchvision, a small model with the same
conv1), converts conv1 with alexop.convert, runs it eagerly, under torch.compile,
exported (torch.export, saved and loaded) and scripted (TorchScript, saved and
loaded), on the GPU if there is one and on the CPU otherwise. Every output is
checked against the unconverted nn.Conv2d model run in float64, and a table of
error and time per path is printed.

    python scripts/demo.py [--batch 8] [--device cuda|cpu]
"""

import argparse
import copy
import tempfile
import time
from pathlib import Path

import torch
from torch import nn

import alexop


def alexnet() -> nn.Module:
    try:
        from torchvision.models import alexnet as tv_alexnet
    except ImportError:
        # torchvision's conv1 and a small head: enough to show the swap.
        return nn.Sequential(
            nn.Conv2d(3, 64, kernel_size=11, stride=4, padding=2),
            nn.ReLU(inplace=True),
            nn.MaxPool2d(kernel_size=3, stride=2),
            nn.AdaptiveAvgPool2d((6, 6)),
            nn.Flatten(),
            nn.Linear(64 * 36, 1000),
        )
    return tv_alexnet(weights=None)


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
    baseline = alexnet().eval().to(device)
    model = alexop.convert(copy.deepcopy(baseline))
    converted = [name for name, m in model.named_modules() if isinstance(m, alexop.Conv11s4)]
    print(f"alexop {alexop.__version__}, torch {torch.__version__}, device {device}"
          f"{' (' + torch.cuda.get_device_name(device) + ')' if device.type == 'cuda' else ''}")
    print(f"converted to alexop.Conv11s4: {converted}")

    x = torch.rand(args.batch, 3, 224, 224, device=device)
    with torch.no_grad():
        want = copy.deepcopy(baseline).double()(x.double())

    paths = {"nn.Conv2d eager (baseline)": baseline, "alexop eager": model}
    paths["alexop torch.compile"] = torch.compile(model, fullgraph=True)
    with tempfile.TemporaryDirectory() as tmp:
        batch = torch.export.Dim("batch", min=1, max=4096)
        exported = torch.export.export(model, (x,), dynamic_shapes={"x": {0: batch}})
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
        rows.append((name, err, (out.double() - want).abs().max().item(), ms, "ok" if ok else "MISMATCH"))

    print(f"\nbatch {args.batch}, 224x224, float32; error against the nn.Conv2d model in float64")
    print(f"{'path':<30} {'rel L2 err':>11} {'max abs err':>12} {'ms/batch':>10}  check")
    for name, err, mx, ms, status in rows:
        print(f"{name:<30} {err:>11.2e} {mx:>12.2e} {ms:>10.2f}  {status}")
    if failed:
        raise SystemExit("some path does not match nn.Conv2d")


if __name__ == "__main__":
    main()
