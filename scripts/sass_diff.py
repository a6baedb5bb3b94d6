#!/usr/bin/env python3
"""Compares the SASS of every kernel in two builds, kernel by kernel.

    python scripts/sass_diff.py BASE NEW [--arch sm_80 --arch sm_90a] [--map-forward-modes]

BASE and NEW are object files, shared libraries or folders of them (e.g.
build/temp*/csrc/cuda of two checkouts). For each architecture, every kernel
is matched by its demangled name with namespaces removed (kernels moved from
anonymous to named namespaces keep their identity); its instructions (the
/*addr*/ comments and encodings dropped) and its resource usage (registers,
shared, stack) must be equal. --map-forward-modes renumbers the forward
gather kernels' MODE argument of BASE into the common MathMode numbering
(the forward's own enum before the restructure). Exits 1 on any difference
or kernel present on one side only.
"""

import argparse
import os
import re
import shutil
import subprocess
import sys
from collections import defaultdict
from pathlib import Path



def tool(name):
    """A CUDA binary utility: CUDA_HOME's, else the first on PATH, else triton's copy."""
    cands = [Path(os.environ.get("CUDA_HOME", "/usr/local/cuda")) / "bin" / name]
    found = shutil.which(name)
    if found:
        cands.append(Path(found))
    try:
        import triton  # noqa: F401  (ships cuobjdump with its NVIDIA backend)

        cands.append(Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / name)
    except ImportError:
        pass
    for c in cands:
        if c.is_file():
            return str(c)
    sys.exit(f"{name} not found (set CUDA_HOME or put it on PATH)")


# The forward's Mode before the restructure -> MathMode:
# kB3 0 -> kBf16x3 4, kTF 1 -> kTf32 1, kHalf 2 -> k16 2, kHalfP 3 -> k16Pairs 5,
# kX3 4 -> k3xTf32 0, kS2D 5 -> k16S2d 6, kS2DL 6 -> k16S2dNhwc 7, kH3 7 -> k3xFp16 3.
FORWARD_MODES = {0: 4, 1: 1, 2: 2, 3: 5, 4: 0, 5: 6, 6: 7, 7: 3}
FORWARD_KERNELS = (
    "conv11s4_fwd_tc_kernel",
    "conv11s4_fwd_gmma_kernel",
    "conv11s4_fwd_s2d_kernel",
    "prep_weights_kernel",
    "prep_weights_gmma_kernel",
)


def objects(path):
    p = Path(path)
    if p.is_dir():
        return sorted(q for q in p.rglob("*") if q.suffix in (".o", ".so", ".cubin"))
    return [p]


def demangle(names):
    if not names:
        return {}
    filt = shutil.which("cu++filt") or shutil.which("c++filt")
    out = subprocess.run([filt], input="\n".join(names), capture_output=True, text=True, check=True).stdout
    out = out.splitlines()
    return dict(zip(names, out))


def normalise_name(name, map_modes):
    # drop namespaces (anonymous ones are per translation unit) and the return type
    name = re.sub(r"\(anonymous namespace\)::", "", name)
    name = re.sub(r"\b[A-Za-z_][A-Za-z0-9_]*::", "", name)
    name = re.sub(r"^void ", "", name)
    name = name.replace("(MathMode)", "").replace("(Mode)", "")
    if map_modes:
        m = re.match(r"(\w+)<([^,]+), (\d+)(.*)$", name)
        if m and m.group(1) in FORWARD_KERNELS:
            name = f"{m.group(1)}<{m.group(2)}, {FORWARD_MODES[int(m.group(3))]}{m.group(4)}"
    return name


def sass(obj):
    """{arch: {mangled name: [instructions]}} and {arch: {mangled: resources}}."""
    text = subprocess.run(
        [tool("cuobjdump"), "-sass", str(obj)], capture_output=True, text=True
    ).stdout
    code = defaultdict(dict)
    arch = fn = None
    for line in text.splitlines():
        s = line.strip()
        m = re.match(r"arch = (sm_\w+)", s)
        if m:
            arch, fn = m.group(1), None
            continue
        m = re.match(r"Function : (\S+)", s)
        if m:
            fn = m.group(1)
            code[arch][fn] = []
            continue
        if fn is None:
            continue
        if s.startswith(".headerflags"):
            code[arch][fn].append(s)
        elif re.match(r"/\*[0-9a-f]{4,}\*/", s):  # an instruction: drop its address and encoding
            code[arch][fn].append(re.sub(r"\s+", " ", re.sub(r"/\*[0-9a-fx]+\*/", "", s)).strip())
    res = defaultdict(dict)
    text = subprocess.run(
        [tool("cuobjdump"), "-res-usage", str(obj)], capture_output=True, text=True
    ).stdout
    arch = None
    lines = text.splitlines()
    for i, line in enumerate(lines):
        m = re.search(r"arch = (sm_\w+)", line)
        if m:
            arch = m.group(1)
        m = re.match(r"\s*Function (\S+):", line)
        if m and i + 1 < len(lines):
            res[arch][m.group(1)] = lines[i + 1].strip()
    return code, res


def collect(path, map_modes, archs):
    kernels = defaultdict(dict)  # arch -> name -> (code, resources, object)
    raw = []
    for obj in objects(path):
        code, res = sass(obj)
        for arch, fns in code.items():
            for fn, ins in fns.items():
                raw.append((arch, fn, ins, res.get(arch, {}).get(fn, "?"), obj))
    names = demangle(sorted({fn for _, fn, *_ in raw}))
    for arch, fn, ins, r, obj in raw:
        if archs and arch not in archs:
            continue
        key = normalise_name(names.get(fn, fn), map_modes)
        if key in kernels[arch]:
            prev = kernels[arch][key]
            if prev[0] != ins:
                sys.exit(f"{arch} {key}: two different bodies in {prev[2]} and {obj}")
            continue
        kernels[arch][key] = (ins, r, obj)
    return kernels


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("base")
    ap.add_argument("new")
    ap.add_argument("--arch", action="append", help="sm_80, sm_90a, ... (default: all)")
    ap.add_argument("--map-forward-modes", action="store_true")
    ap.add_argument("-v", "--verbose", action="store_true", help="list every kernel")
    ap.add_argument("--common", action="store_true", help="compare only the kernels both sides have")
    args = ap.parse_args()
    base = collect(args.base, args.map_forward_modes, args.arch)
    new = collect(args.new, False, args.arch)
    bad = 0
    for arch in sorted(set(base) | set(new)):
        b, n = base.get(arch, {}), new.get(arch, {})
        same = 0
        keys = set(b) & set(n) if args.common else set(b) | set(n)
        for key in sorted(keys):
            if key not in n:
                print(f"{arch} only in base: {key}")
                bad += 1
            elif key not in b:
                print(f"{arch} only in new:  {key}")
                bad += 1
            elif b[key][0] != n[key][0]:
                ib, inn = b[key][0], n[key][0]
                first = next((i for i, (x, y) in enumerate(zip(ib, inn)) if x != y), min(len(ib), len(inn)))
                print(f"{arch} SASS differs: {key} ({len(ib)} vs {len(inn)} instructions, first at {first})")
                bad += 1
            elif b[key][1] != n[key][1]:
                print(f"{arch} resources differ: {key}: {b[key][1]} vs {n[key][1]}")
                bad += 1
            else:
                same += 1
                if args.verbose:
                    print(f"{arch} same: {key} ({len(b[key][0])} instructions)")
        print(f"{arch}: {same} kernels identical, {len(b)} in base, {len(n)} in new")
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
