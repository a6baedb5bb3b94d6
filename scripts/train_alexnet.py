"""Train torchvision's AlexNet with conv1 on nn.Conv2d and on alexop, side by side.

The same seed, model initialisation, synthetic batches and dropout masks are
used for every run: first with torchvision's ``nn.Conv2d`` conv1 ("conv2d"),
then with ``alexop.convert(model)`` ("alexop", conv1 becomes an
``alexop.Conv11s4`` sharing the same parameters), in eager mode and, with
``--compile``, also under ``torch.compile``. The script prints the median time
of a training step (forward, backward, SGD step) of each run, the speedup of
the whole step and of conv1 alone (conv1's forward + weight/bias backward on
the same input shape, timed separately), draws all loss curves in one PNG and
checks that the alexop and nn.Conv2d loss curves agree (see "The bound").

    python scripts/train_alexnet.py                                # CUDA if present, else CPU
    python scripts/train_alexnet.py --device cuda --steps 30 --compile
    python scripts/train_alexnet.py --device cpu --steps 10 --batch 8 --image-size 95
    python scripts/train_alexnet.py --filters 96                   # the original 96-filter conv1
    torchrun --nproc-per-node 2 scripts/train_alexnet.py --device cuda   # DistributedDataParallel

Data: synthetic and generated on the device, nothing is downloaded. Each class
is a fixed random low-frequency template image (3x7x7 Gaussian noise upsampled
bicubically to the image size, unit variance); a sample is its class template
with a random contrast in [0.5, 1.5], circularly shifted by up to 1/16 of the
image size in each direction, plus white Gaussian noise of standard deviation
0.5 (``--noise``). 10% of the labels are replaced by random ones, so the loss
cannot reach zero (its floor is ~0.5 with 10 classes) and the relative
agreement of two loss curves stays meaningful. The classes are learnable: a
plain correlation with the templates classifies ~90% of the samples, and with
the defaults the loss falls below ln(10) = 2.30 within 20-30 steps (measured
on the CPU, 127x127, batch 32: 2.44 -> 1.80 in 20 steps).

Model: ``torchvision.models.alexnet(num_classes=10)`` (``--width`` narrows its
4096-wide classifier for quick CPU runs); ``--filters 96`` swaps features[0]
for ``nn.Conv2d(3, 96, 11, 4, 2)`` and features[3] for
``nn.Conv2d(96, 192, 5, padding=2)`` (the original paper's 96 conv1 filters).
Initialisation (``--init scaled``, the default): He normal weights, zero
biases, and the last layer rescaled so the logits have standard deviation 0.4
on one synthetic batch; PyTorch's default init (``--init torchvision``) leaves
AlexNet on a plateau at ln(10) for hundreds of steps. Optimizer: SGD with
momentum 0.9 and a per-layer step ``--lr / (fan_in * E[input^2])`` (E from
the same init batch): SGD changes a layer's output by ~lr * fan_in * E[x^2]
times its gradient, so one plain lr cannot suit both conv1 (fan_in 363, unit
inputs) and the classifier (fan_in 9216, inputs of mean square ~10); with a
plain lr, AlexNet at 224x224 either does not move or blows up (loss 2.7 -> 16
in one step at lr 0.002, and the two runs then drift apart chaotically).
Dropout is off by default (``--dropout 0.5`` is torchvision's): with it the
loss did not fall within 20 steps at batch 32. Not Adam: its first updates are ~lr * sign(grad), which turns rounding-level
differences into +-lr steps; two runs that differ only in float32 rounding
drifted apart by ~10x per step (1e-7 at step 1, 6e-3 at step 16), while SGD
responds linearly.

Timing: per-step CUDA events on the GPU (no synchronisation inside the
training loop: losses stay on the device until the run ends), perf_counter on
the CPU; the median over the steps after the first ``--warmup`` (the first
step of a compiled run includes compilation; it is reported separately). On
CUDA, cudnn.benchmark is on (``--no-cudnn-benchmark`` turns it off).
Under ``--compile`` the model (forward and backward) is compiled with
``fullgraph=True``; the optimizer step stays eager.

The bound
---------
Both runs compute the same mathematical function; they differ only in how
conv1's sums are rounded (different kernels, different summation orders).
The check is

    max over steps t of |loss_conv2d(t) - loss_alexop(t)| / loss_conv2d(t) <= bound

* float32 (the CPU; CUDA with ``--no-tf32``, where alexop runs 3xTF32, or
  3xFP16 for the Hopper forward, and cuDNN true float32): bound 1e-3.
  Float32 conv1 outputs and gradients agree to a relative ~1e-6 (unit
  roundoff 6e-8, sums of 363 to ~1e5 terms in different orders). SGD
  responds about linearly to such a perturbation, but training amplifies it
  over the steps. Measured on the CPU: 63x63 images,
  classifier width 256, batch 32, 16-20 steps: max 1e-7 to 3e-7 (lr 2 to 10,
  i.e. the rounding of the loss itself); 127x127, width 4096, batch 32, 20
  steps: 3.6e-5 at lr 2 (the default), 3.8e-4 at lr 5; 224x224, width 4096,
  batch 16, 20 steps, the defaults: 2.3e-4. The bound sits above
  these and catches real errors: scaling alexop's conv1 weight gradient by
  0.9 moves the curve by 1.0e-3 within 16 steps (63x63, lr 2), a wrong
  output or a wrong gradient of any size within a step or two.
* TF32 (the default on CUDA: cudnn.allow_tf32 and
  ``torch.set_float32_matmul_precision("high")``, under which alexop runs its
  bf16x3 forward (3xFP16 on Hopper where that runs) and TF32 weight
  gradient, and the classifier's matmuls use
  TF32): bound 5e-2. TF32 keeps a 10-bit mantissa (unit roundoff 2^-11 =
  4.9e-4), so conv1 outputs and gradients from two kernels that round
  differently (cuDNN TF32 against alexop's kernels) differ element-wise by
  up to ~1e-3 relative, ~1000x the float32 differences, and with
  cudnn.benchmark each run may pick other algorithms for conv2-conv5 too. At
  step 0 this moves the loss by ~1e-5 or less (the errors are unbiased and
  averaged), but the training amplifies the perturbation as above (~300x
  over 20 steps at 127x127), so the TF32 curves can drift apart by ~1e-2
  over 30 steps; 5e-2 allows for that. It only catches gross errors (a
  gradient off by tens of percent, a wrong output); ``--no-tf32`` is the
  strict check on the GPU.

With ``--compile`` the two compiled runs are checked against each other with
the same bound (the eager and compiled curves are not compared: Inductor's
fusions round differently; their difference is printed for information).
The script exits with status 1 if a check fails.

Multi-GPU: under ``torchrun --nproc-per-node N`` (or with a process group
already initialised by the caller) it initialises the process group (NCCL on
CUDA, gloo on the CPU), converts conv1 *before* wrapping the model in
DistributedDataParallel (the converted module shares conv1's parameters, and
DDP must see the final module tree), generates the same global batch on every
rank and gives each rank its 1/N slice (``--batch`` is the global batch, a
multiple of N), averages the per-rank losses for the curves, and only rank 0
prints, plots and writes files.

Outputs (``--out``, default train_results/): train_alexnet.json (config,
device, curves, step times, medians, speedups, the bound and the check) and
train_alexnet.png (if matplotlib is installed).

The core is importable: ``train(Config(...)) -> dict`` (used by
tests/test_train.py); ``main(argv)`` is the command line.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
import time
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch
import torch.distributed as dist
import torch.nn.functional as F
import torchvision
from torch import nn

import alexop

try:
    from tqdm import tqdm as _tqdm
except ImportError:  # pragma: no cover - depends on the environment
    _tqdm = None

BOUND_FP32 = 1e-3
BOUND_TF32 = 5e-2
IMPLS = ("conv2d", "alexop")
LOGIT_STD = 0.4  # the standard deviation of the logits at initialisation (--init scaled)
MIN_IMAGE_SIZE = 63  # smallest input AlexNet's features accept (the last max-pool needs 3x3)


@dataclass
class Config:
    device: str = "cuda" if torch.cuda.is_available() else "cpu"
    steps: int = 30
    batch: int | None = None  # global batch; None: 256 on CUDA, 16 on the CPU
    image_size: int = 224
    compile: bool = False
    compile_backend: str = "inductor"
    filters: int = 64
    num_classes: int = 10
    width: int = 4096  # the classifier's hidden width (torchvision: 4096)
    init: str = "scaled"  # or "torchvision" (PyTorch's default init)
    optimizer: str = "sgd"
    lr: float = 2.0  # SGD step, per layer divided by fan_in * E[input^2] (--init scaled)
    momentum: float = 0.9
    dropout: float = 0.0  # torchvision's AlexNet: 0.5 (see the docstring)
    seed: int = 0
    noise: float = 0.5  # std of the white noise added to the unit-variance templates
    max_shift: float = 0.0625  # random circular shifts up to this fraction of the image size
    flip: bool = False  # random horizontal mirroring
    label_noise: float = 0.1  # fraction of random labels
    tf32: bool | None = None  # None: on for CUDA (float32 on the CPU)
    cudnn_benchmark: bool = True
    warmup: int = 3  # steps left out of the medians
    conv1_reps: int = 20  # timed repetitions of conv1 alone (0: skip)
    impls: tuple = IMPLS
    capture_grads: bool = False  # keep the gradients of the first step (tests)
    out: str | None = "train_results"
    plot: bool = True
    progress: bool = True

    def resolved_batch(self) -> int:
        if self.batch is not None:
            return self.batch
        return 256 if self.device.startswith("cuda") else 16

    def use_tf32(self) -> bool:
        return self.device.startswith("cuda") and (self.tf32 is None or self.tf32)

    def bound(self) -> float:
        return BOUND_TF32 if self.use_tf32() else BOUND_FP32


# --------------------------------------------------------------------------- #
# Model and data
# --------------------------------------------------------------------------- #


def build_model(config: Config, impl: str) -> nn.Module:
    """torchvision's AlexNet, seeded; conv1 on alexop when impl == "alexop"."""
    if impl not in IMPLS:
        raise ValueError(f"impl must be one of {IMPLS}, got {impl!r}")
    if config.filters not in (64, 96):
        raise ValueError(f"filters must be 64 (torchvision) or 96 (the original AlexNet), got {config.filters}")
    torch.manual_seed(config.seed)
    model = torchvision.models.alexnet(num_classes=config.num_classes, dropout=config.dropout)
    if config.filters == 96:
        model.features[0] = nn.Conv2d(3, 96, kernel_size=11, stride=4, padding=2)
        model.features[3] = nn.Conv2d(96, 192, kernel_size=5, padding=2)
    if config.width != 4096:  # a narrower classifier, for quick CPU runs and tests
        model.classifier[1] = nn.Linear(256 * 6 * 6, config.width)
        model.classifier[4] = nn.Linear(config.width, config.width)
        model.classifier[6] = nn.Linear(config.width, config.num_classes)
    if config.init == "scaled":
        init_scaled(model, config)
    if impl == "alexop":
        model = alexop.convert(model)  # before .to() / DDP: parameters are shared, not copied
        assert isinstance(model.features[0], alexop.Conv11s4), model.features[0]
    return model


def init_scaled(model: nn.Module, config: Config) -> None:
    """He normal weights (fan_in, ReLU gain) and zero biases; the last layer then rescaled so the
    logits have standard deviation ``LOGIT_STD`` on one synthetic batch (a data-dependent init).

    With zero biases the network is positively homogeneous (ReLU, max-pool, average-pool), so one
    forward pass gives the scale, whatever the image size and classifier width. It runs on the CPU
    in float32 before the model is converted or moved, so both runs start from bitwise the same
    weights on any device. PyTorch's default init (``--init torchvision``) shrinks the signal ~100x
    through AlexNet's 8 layers, which then sits on a plateau at ln(classes) for hundreds of SGD
    steps; He init with a fixed small last layer gives logits whose scale grows with the width.
    """
    layers = [m for m in model.modules() if isinstance(m, (nn.Conv2d, nn.Linear))]
    for m in layers:
        nn.init.kaiming_normal_(m.weight, mode="fan_in", nonlinearity="relu")
        nn.init.zeros_(m.bias)
    g = torch.Generator().manual_seed(config.seed + 5)
    x, _ = synthetic_batch(make_templates(config, "cpu"), 8, g, config)
    second_moment = {}
    hooks = [
        m.register_forward_pre_hook(lambda m, i: second_moment.__setitem__(m, i[0].double().square().mean().item()))
        for m in layers
    ]
    training = model.training
    model.eval()
    with torch.no_grad():
        std = model(x).double().std().item()
        layers[-1].weight.mul_(LOGIT_STD / std)
    model.train(training)
    for h in hooks:
        h.remove()
    for m in layers:
        # SGD changes a layer's output by ~lr * fan_in * E[x^2] * (its output gradient): a
        # per-layer step of lr / (fan_in * E[x^2]) moves every layer at the same relative rate.
        scale = 1.0 / (m.weight[0].numel() * second_moment[m])
        m.weight.lr_scale = scale
        m.bias.lr_scale = scale


def make_templates(config: Config, device) -> torch.Tensor:
    """One fixed low-frequency image per class, (classes, 3, S, S), unit variance."""
    g = torch.Generator().manual_seed(config.seed + 1)
    low = torch.randn(config.num_classes, 3, 7, 7, generator=g)
    t = F.interpolate(low, size=(config.image_size, config.image_size), mode="bicubic", align_corners=False)
    t = (t - t.mean(dim=(1, 2, 3), keepdim=True)) / t.std(dim=(1, 2, 3), keepdim=True)
    return t.to(device)


def synthetic_batch(templates: torch.Tensor, n: int, generator: torch.Generator, config: Config):
    """n samples: shifted, mirrored, contrast-jittered class templates plus noise; some random labels."""
    classes, c, s, _ = templates.shape
    dev = templates.device
    y = torch.randint(classes, (n,), device=dev, generator=generator)
    contrast = torch.empty(n, 1, 1, 1, device=dev).uniform_(0.5, 1.5, generator=generator)
    max_shift = int(config.max_shift * s)
    shift = torch.randint(-max_shift, max_shift + 1, (n, 2), device=dev, generator=generator)
    flip = torch.rand(n, device=dev, generator=generator) < (0.5 if config.flip else 0.0)
    noise = torch.randn(n, c, s, s, device=dev, generator=generator)
    wrong = torch.rand(n, device=dev, generator=generator) < config.label_noise
    random_labels = torch.randint(classes, (n,), device=dev, generator=generator)

    ar = torch.arange(s, device=dev)
    rows = (ar[None, :] + shift[:, :1]) % s  # (n, s)
    cols = (ar[None, :] + shift[:, 1:]) % s
    cols = torch.where(flip[:, None], cols.flip(1), cols)
    x = templates[y]
    x = x.gather(2, rows[:, None, :, None].expand(n, c, s, s))
    x = x.gather(3, cols[:, None, None, :].expand(n, c, s, s))
    x = contrast * x + config.noise * noise
    return x.contiguous(), torch.where(wrong, random_labels, y)


# --------------------------------------------------------------------------- #
# Environment: device, process group, precision
# --------------------------------------------------------------------------- #


@dataclass
class Dist:
    rank: int = 0
    world: int = 1
    device: torch.device = field(default_factory=lambda: torch.device("cpu"))
    owns_group: bool = False

    @property
    def main(self) -> bool:
        return self.rank == 0


def setup(config: Config) -> Dist:
    """Resolves the device and joins (or creates, under torchrun) the process group."""
    want = torch.device(config.device)
    owns = False
    if not dist.is_initialized() and int(os.environ.get("WORLD_SIZE", "1")) > 1:
        if want.type == "cuda":
            torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
        dist.init_process_group("nccl" if want.type == "cuda" else "gloo")
        owns = True
    rank, world = (dist.get_rank(), dist.get_world_size()) if dist.is_initialized() else (0, 1)
    if want.type == "cuda":
        if not torch.cuda.is_available():
            raise RuntimeError("--device cuda, but torch.cuda.is_available() is False")
        if world > 1:
            local = int(os.environ.get("LOCAL_RANK", rank % torch.cuda.device_count()))
            want = torch.device("cuda", local)
        elif want.index is None:
            want = torch.device("cuda", torch.cuda.current_device())
        torch.cuda.set_device(want)
    return Dist(rank=rank, world=world, device=want, owns_group=owns)


@contextmanager
def precision(config: Config):
    """float32 everywhere, or TF32 for cuDNN, matmuls and alexop (CUDA default)."""
    saved = (
        torch.backends.cudnn.allow_tf32,
        torch.backends.cudnn.benchmark,
        torch.get_float32_matmul_precision(),
    )
    cuda = config.device.startswith("cuda")
    torch.backends.cudnn.allow_tf32 = config.use_tf32()
    torch.backends.cudnn.benchmark = cuda and config.cudnn_benchmark
    torch.set_float32_matmul_precision("high" if config.use_tf32() else "highest")
    try:
        yield
    finally:
        torch.backends.cudnn.allow_tf32, torch.backends.cudnn.benchmark = saved[:2]
        torch.set_float32_matmul_precision(saved[2])


class Timer:
    """Per-interval times in ms: CUDA events on the GPU (read at the end), perf_counter on the CPU."""

    def __init__(self, device: torch.device):
        self.cuda = device.type == "cuda"
        self.spans = []

    def start(self):
        if self.cuda:
            e = torch.cuda.Event(enable_timing=True)
            e.record()
            self._start = e
        else:
            self._start = time.perf_counter()

    def stop(self):
        if self.cuda:
            e = torch.cuda.Event(enable_timing=True)
            e.record()
            self.spans.append((self._start, e))
        else:
            self.spans.append((time.perf_counter() - self._start) * 1e3)

    def times_ms(self) -> list:
        if self.cuda:
            torch.cuda.synchronize()
            return [a.elapsed_time(b) for a, b in self.spans]
        return list(self.spans)


def progress(total: int, desc: str, enabled: bool):
    """tqdm if installed, else one line on stderr; an object with update(n)/close()."""
    if not enabled:
        return _NoProgress()
    if _tqdm is not None:
        return _tqdm(total=total, desc=desc, file=sys.stderr, leave=False)
    return _LineProgress(total, desc)


class _NoProgress:
    def update(self, n=1):
        pass

    def close(self):
        pass


class _LineProgress:
    def __init__(self, total, desc):
        self.total, self.desc, self.n, self.t0 = total, desc, 0, time.perf_counter()

    def update(self, n=1):
        self.n += n
        dt = time.perf_counter() - self.t0
        print(f"\r{self.desc}: {self.n}/{self.total} steps, {dt:.1f}s", end="", file=sys.stderr, flush=True)

    def close(self):
        print(file=sys.stderr, flush=True)


# --------------------------------------------------------------------------- #
# Training and timing
# --------------------------------------------------------------------------- #


def _median(xs):
    return statistics.median(xs) if xs else float("nan")


def make_optimizer(config: Config, params):
    params = list(params)
    if config.optimizer == "sgd":
        scales = sorted({getattr(p, "lr_scale", 1.0) for p in params})
        groups = [{"params": [p for p in params if getattr(p, "lr_scale", 1.0) == s], "lr": config.lr * s} for s in scales]
        return torch.optim.SGD(groups, lr=config.lr, momentum=config.momentum)
    if config.optimizer == "adam":  # for experiments only: see the docstring
        return torch.optim.Adam(params, lr=config.lr)
    raise ValueError(f"optimizer must be sgd or adam, got {config.optimizer!r}")


def train_run(config: Config, impl: str, compiled: bool, env: Dist) -> dict:
    """One training run: the loss curve, per-step times and optionally the first step's gradients."""
    device = env.device
    model = build_model(config, impl).to(device)  # converted before DDP wraps it
    module = model
    if env.world > 1:
        ids = [device.index] if device.type == "cuda" else None
        model = nn.parallel.DistributedDataParallel(model, device_ids=ids)
    opt = make_optimizer(config, model.parameters())
    forward = model
    if compiled:
        torch._dynamo.reset()
        # fullgraph: alexop must not break the graph; DDP's optimizer splits graphs at buckets itself.
        forward = torch.compile(model, backend=config.compile_backend, fullgraph=env.world == 1)

    batch = config.resolved_batch()
    if batch % env.world:
        raise ValueError(f"--batch {batch} must be a multiple of the number of processes {env.world}")
    per_rank = batch // env.world
    lo, hi = env.rank * per_rank, (env.rank + 1) * per_rank
    templates = make_templates(config, device)
    gen = torch.Generator(device=device).manual_seed(config.seed + 2)
    torch.manual_seed(config.seed + 3 + env.rank)  # dropout masks: identical for every run of a rank

    timer = Timer(device)
    losses, grads = [], None
    bar = progress(config.steps, f"{'compiled' if compiled else 'eager'}/{impl}", config.progress and env.main)
    model.train()
    for step in range(config.steps):
        x, y = synthetic_batch(templates, batch, gen, config)  # the global batch, the same on every rank
        x, y = x[lo:hi], y[lo:hi]
        timer.start()
        opt.zero_grad(set_to_none=True)
        loss = F.cross_entropy(forward(x), y)
        loss.backward()
        if config.capture_grads and step == 0:
            grads = {n: p.grad.detach().cpu().clone() for n, p in module.named_parameters()}
        opt.step()
        timer.stop()
        losses.append(loss.detach())
        bar.update(1)
    bar.close()

    curve = torch.stack(losses).float() if losses else torch.zeros(0, device=device)
    if env.world > 1:  # the curve of the global batch: the mean of the ranks' shard losses
        dist.all_reduce(curve)
        curve /= env.world
    times = timer.times_ms()
    return {
        "impl": impl,
        "compiled": compiled,
        "losses": curve.cpu().tolist(),
        "step_ms": times,
        "median_step_ms": _median(times[config.warmup :]),
        "first_step_ms": times[0] if times else float("nan"),
        "grads": grads,
    }


def time_conv1(config: Config, impl: str, compiled: bool, env: Dist) -> float:
    """Median ms of conv1 alone, forward + weight/bias backward, on one rank's input shape."""
    device = env.device
    torch.manual_seed(config.seed)
    conv = nn.Conv2d(3, config.filters, kernel_size=11, stride=4, padding=2).to(device)
    if impl == "alexop":
        conv = alexop.convert(conv)
    fn = conv
    if compiled:
        torch._dynamo.reset()
        fn = torch.compile(conv, backend=config.compile_backend, fullgraph=True)
    n = config.resolved_batch() // env.world
    g = torch.Generator(device=device).manual_seed(config.seed + 4)
    x = torch.randn(n, 3, config.image_size, config.image_size, device=device, generator=g)
    params = [conv.weight, conv.bias]
    dy = None
    timer = Timer(device)
    for i in range(config.warmup + config.conv1_reps):
        if i >= config.warmup:
            timer.start()
        y = fn(x)
        if dy is None:
            dy = torch.randn(y.shape, device=device, generator=g)
        torch.autograd.grad(y, params, dy)
        if i >= config.warmup:
            timer.stop()
    return _median(timer.times_ms())


def _agreement(a: list, b: list) -> float:
    if len(a) != len(b) or not a:
        return float("nan")
    diffs = [abs(x - y) / abs(x) for x, y in zip(a, b)]
    return max(diffs) if all(math.isfinite(d) for d in diffs) else float("inf")


def train(config: Config) -> dict:
    """Every run of the comparison; returns curves, timings, speedups and the check (see the docstring)."""
    env = setup(config)
    if config.image_size < MIN_IMAGE_SIZE:
        raise ValueError(f"--image-size must be >= {MIN_IMAGE_SIZE} for AlexNet, got {config.image_size}")
    modes = [False, True] if config.compile else [False]
    runs, conv1 = {}, {}
    try:
        with precision(config):
            for compiled in modes:
                mode = "compiled" if compiled else "eager"
                for impl in config.impls:
                    runs[f"{mode}/{impl}"] = train_run(config, impl, compiled, env)
                if config.conv1_reps > 0:
                    for impl in config.impls:
                        conv1[f"{mode}/{impl}"] = time_conv1(config, impl, compiled, env)
    finally:
        if env.owns_group:
            # Leave the group to the end of the process when the caller reads results on every rank.
            dist.barrier()

    bound = config.bound()
    checks, speedups = {}, {}
    for compiled in modes:
        mode = "compiled" if compiled else "eager"
        a, b = runs.get(f"{mode}/conv2d"), runs.get(f"{mode}/alexop")
        if a is None or b is None:
            continue
        diff = _agreement(a["losses"], b["losses"])
        checks[mode] = {"max_rel_diff": diff, "bound": bound, "ok": bool(diff <= bound)}
        speedups[mode] = {
            "step": a["median_step_ms"] / b["median_step_ms"],
            "conv1": conv1[f"{mode}/conv2d"] / conv1[f"{mode}/alexop"] if conv1 else float("nan"),
        }
    info = {}
    if "eager/conv2d" in runs and "compiled/conv2d" in runs:
        info["eager_vs_compiled_conv2d_max_rel_diff"] = _agreement(
            runs["eager/conv2d"]["losses"], runs["compiled/conv2d"]["losses"]
        )
    falls = {
        name: _loss_falls(r["losses"]) for name, r in runs.items()
    }
    device_name = torch.cuda.get_device_name(env.device) if env.device.type == "cuda" else _cpu_name()
    return {
        "config": {**asdict(config), "batch": config.resolved_batch(), "tf32": config.use_tf32()},
        "device": str(env.device),
        "device_name": device_name,
        "world_size": env.world,
        "rank": env.rank,
        "torch": torch.__version__,
        "runs": runs,
        "conv1_ms": conv1,
        "speedup": speedups,
        "checks": checks,
        "loss_falls": falls,
        "info": info,
        "ok": all(c["ok"] for c in checks.values()),
    }


def _loss_falls(losses: list) -> bool:
    """Mean of the last quarter of the steps below the mean of the first quarter (at least 1 step each)."""
    k = max(1, len(losses) // 4)
    return len(losses) >= 2 and sum(losses[-k:]) / k < sum(losses[:k]) / k


def _cpu_name() -> str:
    import platform

    return f"{platform.processor() or platform.machine()}, {torch.get_num_threads()} threads"


# --------------------------------------------------------------------------- #
# Reporting
# --------------------------------------------------------------------------- #


def report(result: dict) -> str:
    c = result["config"]
    lines = [
        f"AlexNet ({c['filters']} conv1 filters, {c['num_classes']} classes), batch {c['batch']}"
        + (f" ({c['batch'] // result['world_size']} per process)" if result["world_size"] > 1 else "")
        + f" "
        f"x 3x{c['image_size']}x{c['image_size']}, {c['steps']} steps, SGD lr {c['lr']}, "
        f"{'TF32' if c['tf32'] else 'float32'}, {result['world_size']} process(es)",
        f"device: {result['device']} ({result['device_name']}), torch {result['torch']}",
        "",
        f"{'run':<18}{'loss first -> last':>22}{'median step ms':>16}{'first step ms':>15}{'conv1 ms':>10}",
    ]
    for name, r in result["runs"].items():
        ls = r["losses"]
        conv1 = result["conv1_ms"].get(name, float("nan"))
        lines.append(
            f"{name:<18}{ls[0]:>10.4f} -> {ls[-1]:<9.4f}{r['median_step_ms']:>16.2f}{r['first_step_ms']:>15.1f}"
            f"{conv1:>10.2f}"
        )
    lines.append("")
    for mode, s in result["speedup"].items():
        chk = result["checks"][mode]
        lines.append(
            f"{mode}: alexop speedup  step x{s['step']:.3f}  conv1 x{s['conv1']:.3f};  "
            f"max |loss_conv2d - loss_alexop| / loss_conv2d = {chk['max_rel_diff']:.2e} "
            f"(bound {chk['bound']:.0e}) {'OK' if chk['ok'] else 'FAIL'}"
        )
    for k, v in result["info"].items():
        lines.append(f"{k} = {v:.2e} (information only)")
    if not all(result["loss_falls"].values()):
        bad = [k for k, v in result["loss_falls"].items() if not v]
        lines.append(f"warning: the loss did not fall in {bad}; try more --steps or another --lr")
    return "\n".join(lines)


def plot(result: dict, path: Path) -> str | None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    fig, ax = plt.subplots(figsize=(7, 4.5))
    styles = {"conv2d": dict(lw=2.5, alpha=0.6), "alexop": dict(lw=1.2, ls="--")}
    for name, r in result["runs"].items():
        ax.plot(range(1, len(r["losses"]) + 1), r["losses"], label=name, **styles[r["impl"]])
    c = result["config"]
    ax.set_xlabel("step")
    ax.set_ylabel("cross-entropy loss")
    checks = "; ".join(
        f"{mode}: max rel. diff {chk['max_rel_diff']:.1e} (bound {chk['bound']:.0e})" for mode, chk in result["checks"].items()
    )
    ax.set_title(
        f"AlexNet conv1: nn.Conv2d vs alexop ({result['device_name']}, batch {c['batch']}, "
        f"{c['image_size']}x{c['image_size']}, {'TF32' if c['tf32'] else 'fp32'})\n{checks}",
        fontsize=9,
    )
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return str(path)


def _json_ready(result: dict) -> dict:
    out = dict(result)
    out["runs"] = {k: {kk: vv for kk, vv in r.items() if kk != "grads"} for k, r in result["runs"].items()}
    return out


def parse_args(argv=None) -> Config:
    d = Config()
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", default=d.device, help="cuda, cuda:N or cpu (default: %(default)s)")
    p.add_argument("--steps", type=int, default=d.steps)
    p.add_argument("--batch", type=int, default=None, help="global batch (default: 256 on CUDA, 16 on the CPU)")
    p.add_argument("--image-size", type=int, default=d.image_size)
    p.add_argument("--compile", action="store_true", help="also run both under torch.compile")
    p.add_argument("--compile-backend", default=d.compile_backend)
    p.add_argument("--filters", type=int, choices=(64, 96), default=d.filters)
    p.add_argument("--num-classes", type=int, default=d.num_classes)
    p.add_argument("--width", type=int, default=d.width, help="classifier hidden width (default: %(default)s)")
    p.add_argument("--init", choices=("scaled", "torchvision"), default=d.init)
    p.add_argument("--optimizer", choices=("sgd", "adam"), default=d.optimizer)
    p.add_argument(
        "--lr", type=float, default=d.lr,
        help="SGD: the per-layer normalised step with --init scaled (default %(default)s), a plain lr with "
        "--init torchvision (e.g. 0.01); Adam: a plain lr (e.g. 3e-4)",
    )  # fmt: skip
    p.add_argument("--dropout", type=float, default=d.dropout)
    p.add_argument("--seed", type=int, default=d.seed)
    p.add_argument("--tf32", action=argparse.BooleanOptionalAction, default=None, help="default: on for CUDA")
    p.add_argument("--cudnn-benchmark", action=argparse.BooleanOptionalAction, default=d.cudnn_benchmark)
    p.add_argument("--warmup", type=int, default=d.warmup)
    p.add_argument("--conv1-reps", type=int, default=d.conv1_reps)
    p.add_argument("--out", default=d.out, help="folder for train_alexnet.json and .png (default: %(default)s)")
    p.add_argument("--no-progress", action="store_true")
    a = p.parse_args(argv)
    return Config(
        device=a.device, steps=a.steps, batch=a.batch, image_size=a.image_size, compile=a.compile,
        compile_backend=a.compile_backend, filters=a.filters, num_classes=a.num_classes, width=a.width,
        init=a.init, optimizer=a.optimizer, lr=a.lr,
        dropout=a.dropout, seed=a.seed, tf32=a.tf32, cudnn_benchmark=a.cudnn_benchmark, warmup=a.warmup,
        conv1_reps=a.conv1_reps, out=a.out, progress=not a.no_progress,
    )  # fmt: skip


def main(argv=None) -> int:
    config = parse_args(argv)
    result = train(config)
    if result["rank"] == 0:
        print(report(result), flush=True)
        if config.out:
            out = Path(config.out)
            out.mkdir(parents=True, exist_ok=True)
            (out / "train_alexnet.json").write_text(json.dumps(_json_ready(result), indent=1))
            png = plot(result, out / "train_alexnet.png") if config.plot else None
            print(f"wrote {out / 'train_alexnet.json'}")
            print(f"wrote {png}" if png else "matplotlib is not installed: no plot (pip install matplotlib)")
        if not result["ok"]:
            print("FAIL: the alexop and nn.Conv2d loss curves disagree beyond the bound", file=sys.stderr)
    if dist.is_initialized() and int(os.environ.get("WORLD_SIZE", "1")) > 1:
        dist.destroy_process_group()
    return 0 if result["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
