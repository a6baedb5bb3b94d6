"""Two builds of alexop side by side, for kernel work: the same cases timed in each.

    python scripts/ab.py run LABEL CASE... [--cudnn] [--guess] [--reps 30] > LABEL.jsonl
    python scripts/ab.py join A.jsonl B.jsonl
    python scripts/ab.py profile CASE...

run times the alexop that Python imports (one build a process: PYTHONPATH picks it) and
prints one JSON line a case: the forward's kernel names (kernel_for), the GPU time of one
call or step queued behind a sleep kernel (bench.py's timing), the lower of two medians of
--reps, and the relative L2 error against float64. --cudnn adds F.conv2d's time, the faster
of NCHW and channels_last at the same precision; --guess the time of the untimed guess
(under torch.backends.cudnn.deterministic the first of two timed choices runs). join prints
B / A for the cases both files hold. profile prints, for each case, the GPU time of every kernel
one call or step launches (torch.profiler, the mean of 5 after 5 warm-ups), largest first.

CASE is N,C_in,C_out,H,W,padding,mode,layout,step, e.g. 64,3,96,224,224,2,bf16,nhwc,fwd:
mode fp32 (fp32-accurate), tf32, bf16 or fp16; layout nchw or nhwc (the input's); step
fwd, fwdw (forward + grad(w, b)) or all (forward + every grad). @FILE reads cases from
FILE, one a line. On the GPU machine, with the baseline's tree carried beside this one
(e.g. dev/base, from `git archive main`), each built in place for sm_90a:

    (cd dev/base && TORCH_CUDA_ARCH_LIST=9.0a python setup.py build_ext --inplace) &
    TORCH_CUDA_ARCH_LIST=9.0a python setup.py build_ext --inplace; wait
    PYTHONPATH=dev/base python scripts/ab.py run main @cases.txt --cudnn > main.jsonl
    PYTHONPATH=. python scripts/ab.py run new @cases.txt > new.jsonl
    python scripts/ab.py join main.jsonl new.jsonl
"""

import argparse
import json
import sys
from pathlib import Path

import torch
import torch.nn.functional as F

MODES = {"fp32": (torch.float32, "highest", False), "tf32": (torch.float32, "medium", True),
         "bf16": (torch.bfloat16, "highest", True), "fp16": (torch.float16, "highest", True)}
STEPS = ("fwd", "fwdw", "all")


def parse_case(text: str) -> tuple:
    f = text.strip().split(",")
    if len(f) != 9 or f[6] not in MODES or f[7] not in ("nchw", "nhwc") or f[8] not in STEPS:
        raise ValueError(f"expected N,C_in,C_out,H,W,padding,{'|'.join(MODES)},nchw|nhwc,"
                         f"{'|'.join(STEPS)}, got {text!r}")
    return (*map(int, f[:6]), *f[6:])


def read_cases(args: list[str]) -> list[tuple]:
    lines = []
    for a in args:
        lines += [l for l in Path(a[1:]).read_text().splitlines() if l.strip()] if a.startswith("@") else [a]
    return [parse_case(l) for l in lines if not l.lstrip().startswith("#")]


def step_of(conv, x, w, b, dy, step):
    """One call (fwd) or training step of conv(x, w, b): the tensors that need grads are leaves
    whose gradients are returned, not accumulated (as after zero_grad's set_to_none: no adds)."""
    if step == "fwd":
        return lambda: conv(x, w, b)
    leaves = [t.detach().requires_grad_() for t in ((x, w, b) if step == "all" else (w, b))]
    args = leaves if step == "all" else (x, *leaves)
    return lambda: torch.autograd.grad(conv(*args), leaves, dy)


def inputs(case):
    """The case's precision set, and fresh random x, w, b and a grad_output dy of the output's shape."""
    import alexop

    n, c, k, h, w_, pad, mode, layout, step = case
    dtype, precision, tf32 = MODES[mode]
    torch.set_float32_matmul_precision(precision)
    torch.backends.cudnn.allow_tf32 = tf32
    fmt = torch.channels_last if layout == "nhwc" else torch.contiguous_format
    x = torch.randn(n, c, h, w_, device="cuda", dtype=dtype).to(memory_format=fmt)
    w = (torch.randn(k, c, 11, 11, device="cuda") / (c * 121) ** 0.5).to(dtype)
    b = torch.randn(k, device="cuda").to(dtype)
    y = alexop.conv11s4(x, w, b, pad)
    return x, w, b, y, torch.randn_like(y)


def run_case(case, reps, cudnn, guess):
    from bench import time_ms

    import alexop

    pad, layout, step = case[5], case[7], case[8]
    x, w, b, y, dy = inputs(case)
    ref = F.conv2d(x.double(), w.double(), b.double(), stride=4, padding=pad)
    out = {"case": list(case), "kernels": alexop.kernel_for(x, w, pad),
           "rel_l2": ((y.double() - ref).norm() / ref.norm()).item()}

    def best(fn):
        return min(time_ms(fn, [()], "cuda", 5, reps)[0] for _ in range(2))

    mine = step_of(lambda x, w, b: alexop.conv11s4(x, w, b, pad), x, w, b, dy, step)
    out["ms"] = best(mine)
    if guess:
        saved = torch.backends.cudnn.deterministic
        torch.backends.cudnn.deterministic = True
        try:
            out["guess_ms"] = best(mine)
        finally:
            torch.backends.cudnn.deterministic = saved
    if cudnn:
        theirs = lambda x, w, b: F.conv2d(x, w, b, stride=4, padding=pad)
        other = x.contiguous() if layout == "nhwc" else x.to(memory_format=torch.channels_last)
        out["cudnn_ms"] = min(best(step_of(theirs, xx, w, b, dy, step)) for xx in (x, other))
    return out


def profile(case) -> None:
    """Print each kernel's GPU time in one call or step of case (the mean of 5, after 5 warm-ups)."""
    from torch.profiler import ProfilerActivity
    from torch.profiler import profile as torch_profile

    import alexop

    pad, step = case[5], case[8]
    x, w, b, _, dy = inputs(case)
    run = step_of(lambda x, w, b: alexop.conv11s4(x, w, b, pad), x, w, b, dy, step)
    for _ in range(5):
        run()
    torch.cuda.synchronize()
    with torch_profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(5):
            run()
        torch.cuda.synchronize()
    us = {}
    for e in prof.events():
        if e.device_type == torch.autograd.DeviceType.CUDA:
            us[e.name] = us.get(e.name, 0.0) + e.device_time / 5
    print(f"== {','.join(map(str, case))}: {sum(us.values()) / 1000:.4f} ms of kernels a step; "
          f"{alexop.kernel_for(x, w, pad)}")
    for name, t in sorted(us.items(), key=lambda item: -item[1]):
        print(f"  {t:9.1f} us  {name[:120]}")


def join(a_file: str, b_file: str) -> None:
    def load(f):
        rows = (json.loads(l) for l in Path(f).read_text().splitlines() if l.startswith("{"))
        return {tuple(r["case"]): r for r in rows}
    a, b = load(a_file), load(b_file)
    print(f"{'case':44s} {'A ms':>8s} {'B ms':>8s} {'B/A':>6s} {'cuDNN':>8s} {'B err':>8s}  forward A | B")
    for key, ra in a.items():
        rb = b.get(key)
        if rb is None or "ms" not in ra or "ms" not in rb:
            print(" ".join(map(str, key)), (rb or {}).get("error") or ra.get("error") or "not in both")
            continue
        cu = ra.get("cudnn_ms") or rb.get("cudnn_ms")
        print(f"{' '.join(map(str, key)):44s} {ra['ms']:8.4f} {rb['ms']:8.4f} {rb['ms'] / ra['ms']:6.3f} "
              f"{f'{cu:8.4f}' if cu else '       -'} {rb['rel_l2']:8.1e}  "
              f"{ra['kernels']['forward']} | {rb['kernels']['forward']}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="time the cases in the alexop Python imports")
    run.add_argument("label")
    run.add_argument("cases", nargs="+", help="N,C_in,C_out,H,W,padding,mode,layout,step or @FILE")
    run.add_argument("--reps", type=int, default=30)
    run.add_argument("--cudnn", action="store_true", help="also F.conv2d, its faster layout")
    run.add_argument("--guess", action="store_true", help="also the untimed guess")
    both = sub.add_parser("join", help="B / A for the cases of two run outputs")
    both.add_argument("a")
    both.add_argument("b")
    prof = sub.add_parser("profile", help="each kernel's GPU time in a case's call or step")
    prof.add_argument("cases", nargs="+", help="N,C_in,C_out,H,W,padding,mode,layout,step or @FILE")
    args = parser.parse_args()
    if args.command == "join":
        return join(args.a, args.b)
    cases = read_cases(args.cases)
    if args.command == "profile":
        for case in cases:
            profile(case)
        return
    sys.path.insert(0, str(Path(__file__).resolve().parent))  # bench.py's timing
    print(f"# {args.label}: {torch.cuda.get_device_name()}, torch {torch.__version__}", flush=True)
    for case in cases:
        try:
            row = run_case(case, args.reps, args.cudnn, args.guess)
        except Exception as e:  # one failing case is reported and the rest still run
            row = {"case": list(case), "error": repr(e)[:300]}
        print(json.dumps({"label": args.label, **row}), flush=True)


if __name__ == "__main__":
    main()
