"""alexop vs cuDNN (and ATen's CPU conv) on AlexNet's first convolution.

Every row times one step side by side in the same run, on the same device:
alexop, then the PyTorch baselines (cuDNN NCHW and channels_last with TF32 allowed
or not and cudnn.benchmark on or off, torch.compile of F.conv2d), with the
relative L2 error against float64 beside every timing. Timing: CUDA events
(perf_counter on the CPU), warm-up, median of --reps, inputs drawn fresh and
rotated among several buffers so no run reads the previous one's data from L2.

On the GPU each timed step is queued behind a sleep kernel that outlasts the
host's work for the step (nvbench's "blocking kernel"): the events then time
the GPU executing the step, not Python, the dispatcher and kernel launches,
which otherwise add 0.02-0.05 ms of idle GPU between the start event and the
first kernel (H100: 0.19 ms for the bf16 forward whose kernels take 0.15).
What the host spends enqueuing the step is reported beside it ("host ms"): a
step whose host time exceeds its GPU time is bound by the host.

    python scripts/bench.py                       # CUDA if present, else CPU
    python scripts/bench.py --quick               # headline rows only
    python scripts/bench.py --device cpu --batches 8 32
    python scripts/bench.py --shapes              # every op over a grid of shapes (bench_shapes.py)
    python scripts/bench.py --quick --doc h200    # also into docs/benchmarks.md, section "h200"

On the CPU each case (batch, dtype, thread count, step) times alexop with NCHW
and with channels_last input and ATen's convolution (oneDNN for float32, and
for bfloat16 on CPUs with AVX512-BF16, where alexop runs ATen's too) with
NCHW and with channels_last input and weight, interleaved call by call
(A/B/C/D, B/C/D/A, ...) so a machine shared with other work slows all alike;
"ratio" is the faster ATen layout's median over alexop's (above 1: alexop is
faster). Defaults: batches 1 8 32, float32, float64 and bfloat16, this
machine's core count and 1 thread:

    python scripts/bench.py --device cpu --threads 2 1 --dtypes float32

Writes bench_results/bench.json, bench.md (a markdown table) and bench.png (if
matplotlib is installed) and prints the table.
"""

import argparse
import json
import os
import platform
import statistics
import sys
import time
from contextlib import contextmanager
from pathlib import Path

import torch
import torch.nn.functional as F

import alexop

try:
    from tqdm import tqdm
except ImportError:  # a minimal stand-in: one line of progress on stderr
    def tqdm(items, desc=""):
        items = list(items)
        for i, item in enumerate(items):
            print(f"\r{desc} {i + 1}/{len(items)}", end="", file=sys.stderr, flush=True)
            yield item
        print(file=sys.stderr)


@contextmanager
def settings(tf32=None, benchmark=None, precision=None):
    saved = (torch.backends.cudnn.allow_tf32, torch.backends.cudnn.benchmark, torch.get_float32_matmul_precision())
    if tf32 is not None:
        torch.backends.cudnn.allow_tf32 = tf32
    if benchmark is not None:
        torch.backends.cudnn.benchmark = benchmark
    if precision is not None:
        torch.set_float32_matmul_precision(precision)
    try:
        yield
    finally:
        torch.backends.cudnn.allow_tf32, torch.backends.cudnn.benchmark = saved[:2]
        torch.set_float32_matmul_precision(saved[2])


def make_data(n, c_out, dtype, device, channels_last, sets, seed):
    g = torch.Generator(device=device).manual_seed(seed)
    bound = (3 * 121) ** -0.5
    data = []
    for _ in range(sets):
        x = torch.rand(n, 3, 224, 224, device=device, dtype=torch.float32, generator=g).to(dtype)
        if channels_last:
            x = x.to(memory_format=torch.channels_last)
        w = ((torch.rand(c_out, 3, 11, 11, device=device, generator=g) * 2 - 1) * bound).to(dtype)
        b = ((torch.rand(c_out, device=device, generator=g) * 2 - 1) * bound).to(dtype)
        dy = torch.randn(n, c_out, 55, 55, device=device, generator=g).to(dtype)
        data.append((x, w, b, dy))
    return data


def step_fn(conv, step):
    """One timed step: 'fwd', 'fwd+bwd(w,b)' (a first layer) or 'fwd+bwd(x,w,b)'."""
    if step == "fwd":
        return lambda x, w, b, dy: conv(x, w, b)
    needs_x = step == "fwd+bwd(x,w,b)"

    def run(x, w, b, dy):
        x = x.detach().requires_grad_(needs_x)
        w = w.detach().requires_grad_()
        b = b.detach().requires_grad_()
        y = conv(x, w, b)
        return torch.autograd.grad(y, (x, w, b) if needs_x else (w, b), dy)

    return run


# torch.cuda._sleep spins for a number of clock cycles; 2e6 a ms is at least a
# ms at the clocks of the GPUs this runs on (<= 2 GHz)
SLEEP_CYCLES_PER_MS = 2_000_000


def time_ms(fn, data, device, warmup, reps):
    """(median GPU ms, median host ms) of one step on the GPU."""
    for i in range(warmup):
        fn(*data[i % len(data)])
    # the warm-up above absorbs one-time work (torch.compile, cuDNN's choice);
    # a second one, behind a 10 ms sleep, measures the host's enqueue time
    torch.cuda.synchronize(device)
    host = []
    for i in range(warmup):
        torch.cuda._sleep(SLEEP_CYCLES_PER_MS * 10)
        start = time.perf_counter()
        fn(*data[i % len(data)])
        host.append((time.perf_counter() - start) * 1e3)
        torch.cuda.synchronize(device)
    # the blocking sleep: twice the slowest warm-up enqueue, at least 0.5 ms
    sleep = int(SLEEP_CYCLES_PER_MS * max(0.5, 2 * max(host)))
    times, host = [], []
    for i in range(reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda._sleep(sleep)
        start.record()
        t0 = time.perf_counter()
        fn(*data[i % len(data)])
        host.append((time.perf_counter() - t0) * 1e3)
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times), statistics.median(host)


def error(fn, data, step):
    """Worst relative L2 error, over the step's outputs, against float64, on the timed
    batch itself: cuDNN chooses its algorithm (and precision) by batch size."""
    x, w, b, dy = data[0]
    got = fn(x, w, b, dy)
    got = (got,) if isinstance(got, torch.Tensor) else got
    ref = step_fn(lambda x, w, b: F.conv2d(x, w, b, stride=4, padding=2), step)(
        *(t.double() for t in (x, w, b, dy)))
    ref = (ref,) if isinstance(ref, torch.Tensor) else ref
    return max(((g.double() - r).norm() / r.norm()).item() for g, r in zip(got, ref))


STEPS = ["fwd", "fwd+bwd(w,b)", "fwd+bwd(x,w,b)"]


def cases(batches, c_outs, steps):
    dtypes = [torch.float32, torch.bfloat16, torch.float16]
    for n in batches:
        for c_out in c_outs:
            for dtype in dtypes:
                for step in steps:
                    yield n, c_out, dtype, step


def variants(dtype, quick):
    """(label, conv, settings, channels_last) for alexop and the cuDNN baselines."""
    op = alexop.conv11s4
    ref = lambda x, w, b: F.conv2d(x, w, b, stride=4, padding=2)  # noqa: E731
    if dtype == torch.float32:
        yield "alexop fp32 (default, fp32-accurate)", op, {"precision": "highest"}, False
        yield "alexop fp32 NHWC in", op, {"precision": "highest"}, True
        yield "alexop fp32 precision=high", op, {"precision": "high"}, False
        yield "alexop TF32 (precision=medium)", op, {"precision": "medium"}, False
        yield "alexop TF32 NHWC in", op, {"precision": "medium"}, True
        for tf32 in (True, False):
            for bench in ((False, True) if not quick else (False,)):
                yield f"cuDNN NCHW tf32={int(tf32)} bench={int(bench)}", ref, {"tf32": tf32, "benchmark": bench}, False
        yield "cuDNN NHWC tf32=1", ref, {"tf32": True}, True
        yield "cuDNN NHWC tf32=0", ref, {"tf32": False}, True
        if not quick:
            yield "torch.compile F.conv2d (tf32=1)", torch.compile(ref), {"tf32": True}, False
    else:
        yield "alexop", op, {}, False
        yield "alexop NHWC in", op, {}, True
        yield "cuDNN NCHW", ref, {}, False
        yield "cuDNN NHWC", ref, {}, True


def cpu_name():
    """The CPU's model name and core count, e.g. 'AMD EPYC (2 cores)'."""
    names = [line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
             if line.startswith("model name")] if Path("/proc/cpuinfo").exists() else []
    return f"{names[0] if names else platform.processor() or 'CPU'} ({os.cpu_count()} cores)"


CPU_VARIANTS = ["alexop", "alexop NHWC in", "ATen NCHW", "ATen NHWC"]


def cpu_variants(data_nchw, data_nhwc):
    """(label, conv, data) for alexop and ATen, NCHW and channels_last input."""
    op = alexop.conv11s4
    ref = lambda x, w, b: F.conv2d(x, w, b, stride=4, padding=2)  # noqa: E731
    # ATen's channels_last case gets a channels_last weight too, as nn.Conv2d.to(channels_last) has
    nhwc_ref = [(x, w.to(memory_format=torch.channels_last), b, dy) for x, w, b, dy in data_nhwc]
    return [("alexop", op, data_nchw), ("alexop NHWC in", op, data_nhwc),
            ("ATen NCHW", ref, data_nchw), ("ATen NHWC", ref, nhwc_ref)]


def time_interleaved(fns, warmup, reps):
    """Median wall ms of each (fn, data), one call each per round, the order rotated every round
    so interference that comes and goes with a period does not fall on one of them. reps=None:
    as many rounds as fit ~10 s, 7 to 21."""
    for fn, data in fns:
        for i in range(warmup):
            fn(*data[i % len(data)])
    times = [[] for _ in fns]
    i = 0
    start = time.perf_counter()
    while i < (reps or 21) and (reps or i < 7 or time.perf_counter() - start < 10):
        for j in range(len(fns)):
            k = (i + j) % len(fns)
            fn, data = fns[k]
            t0 = time.perf_counter()
            fn(*data[i % len(data)])
            times[k].append((time.perf_counter() - t0) * 1e3)
        i += 1
    return [statistics.median(t) for t in times]


def run_cpu(args, env):
    rows = []
    dtypes = [getattr(torch, d) for d in args.dtypes]
    todo = [(t, n, c, d, s) for t in args.threads for n in args.batches or [1, 8, 32] for c in args.c_out
            for d in dtypes for s in args.steps]
    saved = torch.get_num_threads()
    for threads, n, c_out, dtype, step in tqdm(todo, desc="bench"):
        torch.set_num_threads(threads)
        data = make_data(n, c_out, dtype, torch.device("cpu"), False, sets=1, seed=n)
        data_nhwc = [(x.to(memory_format=torch.channels_last), w, b, dy) for x, w, b, dy in data]
        impls = [(label, step_fn(conv, step), d) for label, conv, d in cpu_variants(data, data_nhwc)]
        times = time_interleaved([(fn, d) for _, fn, d in impls], args.warmup, args.reps)
        best = min(ms for (label, _, _), ms in zip(impls, times) if label.startswith("ATen"))
        for (label, fn, d), ms in zip(impls, times):
            rows.append({**env, "batch": n, "c_out": c_out, "dtype": str(dtype).removeprefix("torch."),
                         "threads": threads, "step": step, "impl": label, "ms": ms, "host_ms": ms,
                         "ratio": best / ms if label.startswith("alexop") else None,
                         "rel_l2": error(fn, d, step)})
    torch.set_num_threads(saved)
    return rows


def cpu_table(rows, env):
    """One line per case: each variant's median ms and the two ratios."""
    header = (f"{env['device_name']}, torch {env['torch']}; 3->C_out, 224x224, pad 2; median wall ms of "
              "interleaved calls; ratio = faster ATen layout / alexop (ATen float32 is oneDNN)")
    lines = [header, "", "| N | C_out | dtype | threads | step | alexop | alexop NHWC in | ATen NCHW | ATen NHWC "
             "| ratio | ratio NHWC in | alexop rel L2 vs fp64 |", "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    cases = {}
    for r in rows:
        cases.setdefault((r["batch"], r["c_out"], r["dtype"], r["threads"], r["step"]), {})[r["impl"]] = r
    for (n, c_out, dtype, threads, step), by in cases.items():
        ms = " | ".join(f"{by[v]['ms']:.2f}" for v in CPU_VARIANTS)
        err = max(by[v]["rel_l2"] for v in CPU_VARIANTS[:2])
        lines.append(f"| {n} | {c_out} | {dtype} | {threads} | {step} | {ms} | {by['alexop']['ratio']:.2f}x "
                     f"| {by['alexop NHWC in']['ratio']:.2f}x | {err:.1e} |")
    return lines


def pyplot():
    """matplotlib.pyplot on the Agg backend, or None (said on stderr) where matplotlib is not installed."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib not installed: no plot", file=sys.stderr)
        return None
    return plt


def plot(rows, path):
    plt = pyplot()
    if plt is None:
        return
    groups = {}
    for r in rows:
        key = f"N={r['batch']} K={r['c_out']} {r['dtype']} {r['step']}"
        entry = groups.setdefault(key, {"alexop": None, "best baseline": None})
        slot = "alexop" if r["impl"].startswith("alexop") else "best baseline"
        if r["impl"].startswith(("alexop TF32", "alexop fp32 precision=high")) or "NHWC in" in r["impl"]:
            continue
        if entry[slot] is None or r["ms"] < entry[slot]:
            entry[slot] = r["ms"]
    keys = [k for k, v in groups.items() if None not in v.values()]
    fig, ax = plt.subplots(figsize=(10, 0.35 * len(keys) + 1.5))
    ys = range(len(keys))
    ax.barh([y + 0.2 for y in ys], [groups[k]["best baseline"] for k in keys], height=0.4, label="fastest PyTorch baseline")
    ax.barh([y - 0.2 for y in ys], [groups[k]["alexop"] for k in keys], height=0.4, label="alexop (default precision)")
    ax.set_yticks(list(ys), keys, fontsize=7)
    ax.set_xlabel("median time (ms)")
    ax.set_xscale("log")
    ax.legend()
    ax.set_title(rows[0]["device_name"] if rows else "")
    fig.tight_layout()
    fig.savefig(path, dpi=120)


DOC = Path(__file__).resolve().parents[1] / "docs" / "benchmarks.md"


def doc_free_argv(argv: list[str]) -> list[str]:
    """argv without --doc and its value (either --doc NAME or --doc=NAME)."""
    out, skip = [], False
    for a in argv:
        if skip:
            skip = False
        elif a == "--doc":
            skip = True
        elif not a.startswith("--doc="):
            out.append(a)
    return out


def write_doc_section(name: str, lines: list[str], command: str) -> None:
    """Puts a table into docs/benchmarks.md between <!-- bench:name --> markers, replacing that section's
    previous table (or appending a new section): the doc holds the latest run of each benchmark."""
    start, end = f"<!-- bench:{name} -->", f"<!-- /bench:{name} -->"
    block = "\n".join([start, f"`{command}`", "", *lines, end])
    text = DOC.read_text() if DOC.exists() else "# Benchmarks\n"
    if start in text and end in text:
        text = text[: text.index(start)] + block + text[text.index(end) + len(end) :]
    else:
        text = text.rstrip("\n") + "\n\n" + block + "\n"
    DOC.write_text(text)
    print(f"wrote section {name!r} of {DOC}")


def main() -> None:
    if "--shapes" in sys.argv:
        import bench_shapes  # the grid of shapes (issue 27) has its own options

        argv = [a for a in sys.argv[1:] if a != "--shapes"]
        return bench_shapes.main(argv)
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--batches", type=int, nargs="+")
    parser.add_argument("--c-out", type=int, nargs="+", default=[96])
    parser.add_argument("--steps", nargs="+", default=STEPS, choices=STEPS)
    parser.add_argument("--reps", type=int, help="timed repetitions (default 30 on the GPU; on the CPU 7 to 21, ~10 s a case)")
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--quick", action="store_true", help="fewer baselines; batch 256 unless --batches")
    parser.add_argument("--threads", type=int, nargs="+", default=sorted({os.cpu_count() or 1, 1}, reverse=True),
                        help="CPU only: thread counts to time, each in turn")
    parser.add_argument("--dtypes", nargs="+", default=["float32", "float64", "bfloat16"],
                        choices=["float32", "float64", "bfloat16", "float16"], help="CPU only")
    parser.add_argument("--out", default="bench_results")
    parser.add_argument("--doc", metavar="SECTION", help="also write the table into docs/benchmarks.md, section SECTION")
    parser.add_argument("--shapes", action="store_true", help="the grid of shapes instead (bench_shapes.py --help)")
    args = parser.parse_args()
    command = "python scripts/bench.py " + " ".join(doc_free_argv(sys.argv[1:]))
    device = torch.device(args.device)
    env = {
        "device_name": torch.cuda.get_device_name(device) if device.type == "cuda" else cpu_name(),
        "torch": torch.__version__,
        "cudnn": torch.backends.cudnn.version() if device.type == "cuda" else None,
    }
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    if device.type == "cpu":
        rows = run_cpu(args, env)
        (out / "bench.json").write_text(json.dumps(rows, indent=1))
        lines = cpu_table(rows, env)
        (out / "bench.md").write_text("\n".join(lines) + "\n")
        print("\n" + "\n".join(lines))
        if args.doc:
            write_doc_section(args.doc, lines, command)
        return
    batches = args.batches or [1, 32, 128, 256, 512]
    if args.quick and not args.batches:
        batches = [256]
    rows = []
    todo = [(c, v) for c in cases(batches, args.c_out, args.steps) for v in variants(c[2], args.quick)]
    for (n, c_out, dtype, step), (label, conv, conf, channels_last) in tqdm(todo, desc="bench"):
        data = make_data(n, c_out, dtype, device, channels_last, sets=3, seed=n)
        fn = step_fn(conv, step)
        with settings(**conf):
            ms, host = time_ms(fn, data, device, args.warmup, args.reps or 30)
            err = error(fn, data, step)
        rows.append({**env, "batch": n, "c_out": c_out, "dtype": str(dtype).removeprefix("torch."), "step": step,
                     "impl": label, "ms": ms, "host_ms": host, "rel_l2": err})
        del data
    (out / "bench.json").write_text(json.dumps(rows, indent=1))
    plot(rows, out / "bench.png")

    timing = "median GPU ms (each step queued behind a sleep kernel) and host ms to enqueue it"
    header = f"{env['device_name']}, torch {env['torch']}, cuDNN {env['cudnn']}; 3->C_out, 224x224, pad 2; {timing}"
    lines = [header, "", "| N | C_out | dtype | step | implementation | ms | host ms | rel L2 vs fp64 |",
             "|---|---|---|---|---|---|---|---|"]
    lines += [f"| {r['batch']} | {r['c_out']} | {r['dtype']} | {r['step']} | {r['impl']} | {r['ms']:.3f} "
              f"| {r['host_ms']:.3f} | {r['rel_l2']:.1e} |" for r in rows]
    (out / "bench.md").write_text("\n".join(lines) + "\n")
    if args.doc:
        write_doc_section(args.doc, lines, command)
    print(f"\n{header}")
    print(f"{'N':>4} {'K':>3} {'dtype':<9} {'step':<15} {'implementation':<40} {'ms':>8} {'host ms':>8} {'rel L2':>9}")
    for r in rows:
        print(f"{r['batch']:>4} {r['c_out']:>3} {r['dtype']:<9} {r['step']:<15} {r['impl']:<40} {r['ms']:>8.3f} "
              f"{r['host_ms']:>8.3f} {r['rel_l2']:>9.1e}")


if __name__ == "__main__":
    main()
