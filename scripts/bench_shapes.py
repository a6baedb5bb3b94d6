"""alexop against cuDNN over a grid of 11x11 stride-4 convolutions (bench.py --shapes).

The grid: C_in {1,2,3,4,8,16} x C_out {16,64,96,128,192,256,384} x images
{63,127,224,227,320x240,512,1024} x padding {0,2,5} x batch {1,8,64,256},
sampled (first layers densest) to fit a time budget. Each case is timed per op
(forward, weight + bias gradient, input gradient) or per training step
(forward; forward + grad(w, b); forward + all grads), alexop against cuDNN's
best of NCHW and channels_last at the same precision:

  fp32     alexop's default ("highest", fp32-accurate) vs cuDNN with TF32 off
  tf32     alexop with precision "medium" vs cuDNN with TF32 on
  bf16     bfloat16 vs cuDNN bfloat16

with the relative L2 error against float64 beside each, and alexop's kernel
choice (alexop.kernel_for). A case where alexop is the slower in either layout is
timed a second time, alexop and cuDNN in both layouts in turn, each keeping its
lower median. Writes <out>/shapes.json, shapes.md (the worst
cases first) and shapes.png (speedup over the grid, if matplotlib is there).

    python scripts/bench.py --shapes [--budget-s 540] [--mode ops|steps] [--grid issue27|channels|odd-widths]
                                     [--doc SECTION]
"""

import argparse
import itertools
import json
import random
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

import alexop
from bench import pyplot, settings, time_ms

C_INS = [1, 2, 3, 4, 8, 16]
C_OUTS = [16, 64, 96, 128, 192, 256, 384]
IMAGES = [(63, 63), (127, 127), (224, 224), (227, 227), (240, 320), (512, 512), (1024, 1024)]
PADS = [0, 2, 5]
BATCHES = [1, 8, 64, 256]
MODES = {"fp32": (torch.float32, "highest", False), "tf32": (torch.float32, "medium", True),
         "bf16": (torch.bfloat16, "highest", True)}
OPS = ["fwd", "wgrad", "dgrad"]
STEPS = ["fwd", "fwd+bwd(w,b)", "fwd+bwd(x,w,b)"]
# Tensors larger than this (bytes) are skipped: the grid must fit any H100.
MAX_TENSOR_BYTES = 6 << 30


def out_size(h, p):
    return (h + 2 * p - 11) // 4 + 1


def shape_grid(seed):
    """Cases in the order they are run: the first-layer core, then sweeps, then random."""
    core = [(64, c, k, (224, 224), 2) for c in (1, 2, 3, 4) for k in (64, 96, 128, 192, 256, 384)]
    images = [(n, 3, 96, hw, p) for hw in IMAGES for p in PADS for n in ((8,) if hw[0] >= 512 else (64,))]
    batches = [(n, c, k, (224, 224), 2) for n in BATCHES for c in (1, 3, 4) for k in (64, 96)]
    wide = [(64, c, k, hw, 2) for c in (8, 16) for k in (16, 64, 128, 384) for hw in ((224, 224), (127, 127))]
    rest = list(itertools.product(BATCHES, C_INS, C_OUTS, IMAGES, PADS))
    random.Random(seed).shuffle(rest)
    seen, grid = set(), []
    for case in itertools.chain(core, images, batches, wide, rest):
        if case not in seen:
            seen.add(case)
            grid.append(case)
    return grid


def channels_grid():
    """The 4-16 channel grid the selectors' few-channel rules were read off (docs/design.md): dense in
    channels and filters, 64 images of 224 and 127 (an odd width), 8 of 512, single images."""
    dense = [(64, c, k, hw, 2) for hw in ((224, 224), (127, 127)) for c in (4, 5, 8, 12, 16)
             for k in (16, 32, 64, 96, 128, 192, 256, 384)]
    wide = [(8, c, k, (512, 512), 2) for c in (4, 8, 16) for k in (64, 128)]
    single = [(1, c, k, (224, 224), 2) for c in (4, 5, 8) for k in (64, 96, 128)]
    return dense + wide + single


def odd_widths_grid():
    """1-4 channels at odd widths (the 16-bit weight gradient widens them by a zero column), each
    beside the even width one narrower: 64 images of 63 / 127 / 227, 8 of 511, padding 0 and 2."""
    images = [((h, h), (h, h - 1)) for h in (63, 127, 227)]
    cases = [(64, c, k, hw, p) for pair in images for c in (1, 2, 3, 4) for k in (64, 96, 192) for p in (0, 2)
             for hw in pair]
    return cases + [(8, c, 96, hw, 2) for c in (1, 3) for hw in ((511, 511), (511, 510))]


GRIDS = {"issue27": shape_grid, "channels": lambda seed: channels_grid(), "odd-widths": lambda seed: odd_widths_grid()}


def fits(n, c, k, hw, p, dtype):
    h, w = hw
    size = torch.tensor([], dtype=dtype).element_size()
    biggest = max(n * c * h * w, n * k * out_size(h, p) * out_size(w, p)) * size
    return out_size(h, p) >= 1 and out_size(w, p) >= 1 and biggest <= MAX_TENSOR_BYTES


def make(n, c, k, hw, p, dtype, device, sets, seed):
    g = torch.Generator(device=device).manual_seed(seed)
    h, w = hw
    bound = (c * 121) ** -0.5
    data = []
    for _ in range(sets):
        x = torch.rand(n, c, h, w, device=device, generator=g).to(dtype)
        wt = ((torch.rand(k, c, 11, 11, device=device, generator=g) * 2 - 1) * bound).to(dtype)
        b = ((torch.rand(k, device=device, generator=g) * 2 - 1) * bound).to(dtype)
        dy = torch.randn(n, k, out_size(h, p), out_size(w, p), device=device, generator=g).to(dtype)
        data.append((x, wt, b, dy))
    return data


def op_fn(impl, op, p):
    """A callable (x, w, b, dy) -> tensor(s) for one op of alexop or cuDNN."""
    if impl == "alexop":
        if op == "fwd":
            return lambda x, w, b, dy: torch.ops.alexop.conv11s4(x, w, b, p)
        if op == "wgrad":
            return lambda x, w, b, dy: torch.ops.alexop.conv11s4_backward_weight(dy, x, p, True)
        return lambda x, w, b, dy: torch.ops.alexop.conv11s4_backward_input(dy, w, list(x.shape), p)
    if op == "fwd":
        return lambda x, w, b, dy: F.conv2d(x, w, b, stride=4, padding=p)
    mask = [op == "dgrad", op == "wgrad", op == "wgrad"]
    return lambda x, w, b, dy: torch.ops.aten.convolution_backward(
        dy, x, w, [w.shape[0]], [4, 4], [p, p], [1, 1], False, [0, 0], 1, mask)


def step_fn(impl, step, p):
    conv = (lambda x, w, b: alexop.conv11s4(x, w, b, p)) if impl == "alexop" else (
        lambda x, w, b: F.conv2d(x, w, b, stride=4, padding=p))
    if step == "fwd":
        return lambda x, w, b, dy: conv(x, w, b)
    needs_x = step == "fwd+bwd(x,w,b)"

    def run(x, w, b, dy):
        x = x.detach().requires_grad_(needs_x)
        w, b = w.detach().requires_grad_(), b.detach().requires_grad_()
        return torch.autograd.grad(conv(x, w, b), (x, w, b) if needs_x else (w, b), dy)

    return run


def error_of(alexop_fn, ref_fn, data):
    """Worst relative L2 error over the outputs, against cuDNN in float64."""
    x, w, b, dy = data[0]
    got = alexop_fn(x, w, b, dy)
    with settings(tf32=False):
        want = ref_fn(*(t.double() for t in (x, w, b, dy)))
    # aten's convolution_backward returns None for the gradients not asked for
    got, want = ([t for t in ((o,) if isinstance(o, torch.Tensor) else o) if t is not None] for o in (got, want))
    return max(((g.double() - r).norm() / r.norm().clamp_min(1e-30)).item() for g, r in zip(got, want))


def time_capped(fn, data, device, reps):
    """Median ms; slow cases (the generic kernels take up to seconds) get fewer repetitions."""
    fn(*data[0])  # one-time work (cuBLAS handles, cuDNN's choice) stays out of the timing
    torch.cuda.synchronize(device)
    start = time.perf_counter()
    fn(*data[0])
    torch.cuda.synchronize(device)
    once = (time.perf_counter() - start) * 1e3
    if once > 50:
        return once  # far off the mark either way: one timing says enough
    return time_ms(fn, data, device, warmup=2, reps=min(reps, 10) if once > 5 else reps)[0]


def run_case(case, mode, what, device, reps):
    n, c, k, hw, p = case
    dtype, precision, tf32 = MODES[mode]
    rows = []
    data_nchw = make(n, c, k, hw, p, dtype, device, sets=2, seed=hash(case) % 1000)
    data_nhwc = [(x.contiguous(memory_format=torch.channels_last), w.contiguous(memory_format=torch.channels_last), b,
                  dy.contiguous(memory_format=torch.channels_last)) for x, w, b, dy in data_nchw]
    data = {"nchw": data_nchw, "nhwc": data_nhwc}
    names = None
    with settings(precision=precision, tf32=tf32):
        if hasattr(alexop, "kernel_for"):
            names = {layout: alexop.kernel_for(d[0][0], d[0][1], p) for layout, d in data.items()}
        for item in (OPS if what == "ops" else STEPS):
            make_fn = op_fn if what == "ops" else step_fn
            fns = {(impl, layout): make_fn(impl, item, p) for impl in ("cudnn", "alexop") for layout in data}
            ms = {key: time_capped(fn, data[key[1]], device, reps) for key, fn in fns.items()}
            if max(ms["alexop", layout] for layout in data) > min(ms["cudnn", layout] for layout in data):
                # a case alexop loses is timed again, all four in turn, each keeping its lower
                # median: a burst of machine noise in one block must not decide it
                for key, fn in fns.items():
                    ms[key] = min(ms[key], time_capped(fn, data[key[1]], device, reps))
            best = min(ms["cudnn", layout] for layout in data)
            for layout, d in data.items():
                fn, mine = fns["alexop", layout], ms["alexop", layout]
                small = n * c * k * hw[0] * hw[1] <= 2**34 and mine <= 50
                err = error_of(fn, fns["cudnn", layout], d) if small else None
                rows.append({"N": n, "C_in": c, "C_out": k, "H": hw[0], "W": hw[1], "pad": p, "mode": mode,
                             "item": item, "layout": layout, "alexop_ms": mine, "cudnn_nchw_ms": ms["cudnn", "nchw"],
                             "cudnn_nhwc_ms": ms["cudnn", "nhwc"], "speedup": best / mine, "rel_l2": err,
                             "kernels": names[layout] if names else None})
    del data_nchw, data_nhwc
    torch.cuda.empty_cache()
    return rows


def first_layer_target(r):
    """The issue's bar: 3x (fp32-accurate, TF32) / 6x (16-bit) for C_in 1-4, 1.5x for 5-16, batch >= 8."""
    if r["N"] < 8 or r["item"] in ("dgrad", "fwd+bwd(x,w,b)"):
        return 1.0
    if r["C_in"] <= 4:
        return 6.0 if r["mode"] == "bf16" else 3.0
    return 1.5


# Hopper's measured tensor-core rates (H200; the H100 has the same SMs and clocks) and HBM rate:
# fp32-accurate runs as three fp16 products. Other GPUs get no floor.
HOPPER_RATES = {"fp32": 777e12 / 3, "tf32": 402e12, "bf16": 777e12}
HOPPER_BYTES_PER_S = {"H100": 3.0e12, "H200": 4.3e12}
PASSES = {"fwd": ("fwd",), "wgrad": ("wgrad",), "dgrad": ("dgrad",), "fwd+bwd(w,b)": ("fwd", "wgrad"),
          "fwd+bwd(x,w,b)": ("fwd", "wgrad", "dgrad")}


def floor_ms(r, device):
    """max(FLOPs / tensor-core rate, bytes / HBM rate) over the case's passes, or None off Hopper."""
    bw = next((v for k, v in HOPPER_BYTES_PER_S.items() if k in device), None)
    if bw is None:
        return None
    P, Q = (r["H"] + 2 * r["pad"] - 11) // 4 + 1, (r["W"] + 2 * r["pad"] - 11) // 4 + 1
    x, y = r["N"] * r["C_in"] * r["H"] * r["W"], r["N"] * r["C_out"] * P * Q
    size = 2 if r["mode"] == "bf16" else 4
    passes = PASSES[r["item"]]
    flops = len(passes) * 2 * y * r["C_in"] * 121
    moved = len(passes) * (x + y) * size  # each pass reads one of input and output and writes the other
    return 1e3 * max(flops / HOPPER_RATES[r["mode"]], moved / bw)


def write(rows, out, env, what):
    out.mkdir(parents=True, exist_ok=True)
    (out / "shapes.json").write_text(json.dumps({"env": env, "rows": rows}, indent=1))
    worst = sorted(rows, key=lambda r: r["speedup"])
    slower = [r for r in rows if r["speedup"] < 0.95]
    below = [r for r in rows if r["speedup"] < first_layer_target(r)]
    lines = [f"{env['device']}, torch {env['torch']}, cuDNN {env['cudnn']}, {env['date']}; per {what}; "
             f"{len(rows)} cases; alexop slower than cuDNN's best layout (by > 5%): {len(slower)}; "
             f"below the first-layer targets: {len(below)}", "",
             "| N | C_in->C_out | H x W | pad | mode | " + ("op" if what == "ops" else "step") +
             " | layout | alexop ms | cuDNN NCHW ms | cuDNN NHWC ms | speedup | floor ms | rel L2 | alexop kernel |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in worst:
        kern = ""
        if r["kernels"]:
            key = {"fwd": "forward", "wgrad": "weight_grad", "dgrad": "input_grad"}.get(r["item"], "forward")
            kern = r["kernels"].get(key, "").replace("|", "\\|")  # two timed choices: "a|b"
        err = "-" if r["rel_l2"] is None else f"{r['rel_l2']:.1e}"
        floor = floor_ms(r, env["device"])
        floor = "-" if floor is None else f"{floor:.3f}"
        lines.append(f"| {r['N']} | {r['C_in']}->{r['C_out']} | {r['H']}x{r['W']} | {r['pad']} | {r['mode']} | "
                     f"{r['item']} | {r['layout']} | {r['alexop_ms']:.3f} | {r['cudnn_nchw_ms']:.3f} | "
                     f"{r['cudnn_nhwc_ms']:.3f} | {r['speedup']:.2f}x | {floor} | {err} | {kern} |")
    (out / "shapes.md").write_text("\n".join(lines) + "\n")
    plot(rows, out / "shapes.png")
    summary = ["| mode | " + ("op" if what == "ops" else "step") + " | cases | slower than cuDNN (> 5%) "
               "| below the first-layer target | min speedup | median speedup |", "|---|---|---|---|---|---|---|"]
    for mode in MODES:
        for item in dict.fromkeys(OPS + STEPS):
            sel = sorted(r["speedup"] for r in rows if r["mode"] == mode and r["item"] == item)
            if sel:
                miss = sum(r["speedup"] < first_layer_target(r) for r in rows if r["mode"] == mode and r["item"] == item)
                summary.append(f"| {mode} | {item} | {len(sel)} | {sum(v < 0.95 for v in sel)} | {miss} "
                               f"| {sel[0]:.2f}x | {sel[len(sel) // 2]:.2f}x |")
    doc = [lines[0], "", *summary, "", "The 30 cases with the lowest speedup:", "", *lines[2:34]]
    print("\n".join(doc))
    return doc


def plot(rows, path):
    plt = pyplot()
    if plt is None:
        return
    items = sorted({r["item"] for r in rows}, key=lambda i: (OPS + STEPS).index(i))
    fig, axes = plt.subplots(1, len(items), figsize=(5 * len(items), 4), sharey=True, squeeze=False)
    for ax, item in zip(axes[0], items):
        for mode, marker in zip(MODES, "o^s"):
            sel = [r for r in rows if r["item"] == item and r["mode"] == mode]
            ax.scatter([r["N"] * r["C_in"] * r["C_out"] * r["H"] * r["W"] for r in sel], [r["speedup"] for r in sel],
                       marker=marker, s=12, label=mode, alpha=0.7)
        ax.axhline(1.0, color="k", lw=0.8)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_title(item)
        ax.set_xlabel("N x C_in x C_out x H x W")
    axes[0][0].set_ylabel("speedup over cuDNN's best layout")
    axes[0][0].legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--budget-s", type=float, default=540, help="stop starting new cases after this long")
    parser.add_argument("--mode", choices=["ops", "steps"], default="steps")
    parser.add_argument("--modes", nargs="+", default=list(MODES), choices=list(MODES))
    parser.add_argument("--reps", type=int, default=20)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--grid", choices=list(GRIDS), default="issue27",
                        help="issue27: the sampled grid above; channels: 4-16 input channels, dense; "
                             "odd-widths: 1-4 channels at odd widths beside the even width one narrower")
    parser.add_argument("--out", default="bench_results")
    parser.add_argument("--doc", metavar="SECTION", help="also write the table into docs/benchmarks.md")
    args = parser.parse_args(argv)
    device = torch.device("cuda")
    env = {"device": torch.cuda.get_device_name(device), "torch": torch.__version__,
           "cudnn": torch.backends.cudnn.version(), "date": time.strftime("%Y-%m-%d")}
    rows, start = [], time.perf_counter()
    done = 0
    for case in GRIDS[args.grid](args.seed):
        if time.perf_counter() - start > args.budget_s:
            break
        for mode in args.modes:
            if not fits(*case, MODES[mode][0]):
                continue
            try:
                rows += run_case(case, mode, args.mode, device, args.reps)
            except torch.OutOfMemoryError:
                torch.cuda.empty_cache()
                print(f"out of memory: {case} {mode}", file=sys.stderr)
        done += 1
        print(f"\r{done} shapes, {len(rows)} rows, {time.perf_counter() - start:.0f} s", end="", file=sys.stderr,
              flush=True)
    print(file=sys.stderr)
    lines = write(rows, Path(args.out), env, args.mode)
    if args.doc:
        from bench import doc_free_argv, write_doc_section

        argv = doc_free_argv(argv if argv is not None else sys.argv[1:])
        write_doc_section(args.doc, lines, "python scripts/bench.py --shapes " + " ".join(argv))


if __name__ == "__main__":
    main()
