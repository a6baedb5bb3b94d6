"""scripts/train_alexnet.py: AlexNet training with conv1 on alexop against nn.Conv2d.

CPU (always): the loss curves agree within the script's bound and fall; the
compiled path; the 96-filter variant; the command line and its exit status;
one DistributedDataParallel step on 2 gloo processes gives the gradients of
the single-process step on the full batch. CUDA (skipped without): the same
DDP check on 2 GPUs with NCCL, alexop on cuda:1, and CUDA graphs
(torch.compile mode="reduce-overhead" and a manual torch.cuda.CUDAGraph
capture of forward + backward) against eager.
"""

import json
import math
import os
import socket
import sys
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn.functional as F
from torch import nn

import alexop
from conftest import assert_matches, make_inputs, needs_cuda, reference, rel_l2

pytest.importorskip("torchvision", reason="scripts/train_alexnet.py trains torchvision's AlexNet")
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))
import train_alexnet as T  # noqa: E402

# Whole training runs: the long end of the suite (scripts/gpu_check.sh and CI run them).
pytestmark = pytest.mark.slow

needs_2_gpus = pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs 2 CUDA GPUs")


def small(**kw) -> T.Config:
    """A CPU-sized run: 63x63 images (AlexNet's smallest), a 256-wide classifier."""
    base = dict(
        device="cpu", steps=20, batch=32, image_size=63, width=256, lr=10.0, warmup=1, conv1_reps=2,
        out=None, plot=False, progress=False,
    )  # fmt: skip
    base.update(kw)
    return T.Config(**base)


def test_alexop_and_conv2d_curves_agree_and_loss_falls():
    result = T.train(small())
    check = result["checks"]["eager"]
    assert check["bound"] == T.BOUND_FP32
    assert check["max_rel_diff"] <= T.BOUND_FP32, check
    assert result["ok"]
    for name, run in result["runs"].items():
        losses = run["losses"]
        assert len(losses) == 20 and all(math.isfinite(v) for v in losses)
        first, last = sum(losses[:5]) / 5, sum(losses[-5:]) / 5
        assert last < 0.85 * first and last < math.log(10), f"{name}: the loss did not fall: {losses}"
        assert run["median_step_ms"] > 0
    assert result["loss_falls"] == {"eager/conv2d": True, "eager/alexop": True}
    assert set(result["conv1_ms"]) == {"eager/conv2d", "eager/alexop"}
    assert result["speedup"]["eager"]["step"] > 0 and result["speedup"]["eager"]["conv1"] > 0


def test_compiled_runs_agree():
    # aot_eager: the same graphs as Inductor gets (fullgraph, alexop ops in the forward and backward
    # graphs) without C++ compilation, which takes minutes on a 2-core CI machine.
    result = T.train(small(steps=3, batch=8, dropout=0.0, compile=True, compile_backend="aot_eager", conv1_reps=0))
    assert set(result["runs"]) == {"eager/conv2d", "eager/alexop", "compiled/conv2d", "compiled/alexop"}
    assert result["checks"]["compiled"]["ok"] and result["checks"]["eager"]["ok"], result["checks"]
    eager, compiled = result["runs"]["eager/alexop"]["losses"], result["runs"]["compiled/alexop"]["losses"]
    assert T._agreement(eager, compiled) <= T.BOUND_FP32


def test_96_filter_variant_converts_and_trains():
    model = T.build_model(small(filters=96), "alexop")
    assert isinstance(model.features[0], alexop.Conv11s4) and model.features[0].out_channels == 96
    assert model.features[3].in_channels == 96
    reference_model = T.build_model(small(filters=96), "conv2d")
    x = torch.randn(2, 3, 63, 63)
    torch.testing.assert_close(model.eval()(x), reference_model.eval()(x), rtol=1e-4, atol=1e-5)


def test_command_line_writes_results_and_exit_status(tmp_path, monkeypatch, capsys):
    args = [
        "--device", "cpu", "--steps", "2", "--batch", "4", "--image-size", "63", "--width", "64",
        "--warmup", "0", "--conv1-reps", "1", "--no-progress", "--out", str(tmp_path),
    ]  # fmt: skip
    assert T.main(args) == 0
    printed = capsys.readouterr().out
    assert "eager: alexop speedup" in printed and "OK" in printed
    saved = json.loads((tmp_path / "train_alexnet.json").read_text())
    assert set(saved["runs"]) == {"eager/conv2d", "eager/alexop"} and saved["ok"]
    assert len(saved["runs"]["eager/alexop"]["losses"]) == 2
    monkeypatch.setattr(T, "BOUND_FP32", -1.0)  # no agreement can pass: the script must fail
    assert T.main(args) == 1


# --------------------------------------------------------------------------- #
# DistributedDataParallel: one step on 2 processes == one step on the full batch
# --------------------------------------------------------------------------- #


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _ddp_worker(rank, world, port, backend, config, path):
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    torch.set_num_threads(1)
    if backend == "nccl":
        torch.cuda.set_device(rank)
    dist.init_process_group(backend, rank=rank, world_size=world)
    try:
        result = T.train(config)
        if rank == 0:
            torch.save({k: (r["grads"], r["losses"]) for k, r in result["runs"].items()}, path)
    finally:
        dist.destroy_process_group()


def _check_ddp_matches_single_process(backend, config, tmp_path, tol):
    path = tmp_path / "ddp.pt"
    mp.spawn(_ddp_worker, args=(2, _free_port(), backend, config, str(path)), nprocs=2, join=True)
    ddp = torch.load(path)
    single = T.train(config)
    assert single["world_size"] == 1
    for name in ("eager/conv2d", "eager/alexop"):
        ddp_grads, ddp_losses = ddp[name]
        grads, losses = single["runs"][name]["grads"], single["runs"][name]["losses"]
        # The DDP curve is the mean of the two half-batch losses: the full-batch loss.
        assert abs(ddp_losses[0] - losses[0]) <= tol * losses[0], (name, ddp_losses, losses)
        assert ddp_grads.keys() == grads.keys() and "features.0.weight" in grads
        for p in grads:
            err = rel_l2(ddp_grads[p], grads[p])
            assert err <= tol, f"{name} {p}: DDP gradient differs from the full-batch one by {err:.2e}"
    # conv1's gradient is the same with alexop as with nn.Conv2d, under DDP too.
    w = "features.0.weight"
    assert rel_l2(ddp["eager/alexop"][0][w], ddp["eager/conv2d"][0][w]) <= tol


def _ddp_config(device):
    return small(
        device=device, steps=1, batch=8, dropout=0.0, capture_grads=True, conv1_reps=0, warmup=0,
        tf32=False, cudnn_benchmark=False,
    )  # fmt: skip


def test_ddp_gloo_two_processes_match_single_process(tmp_path):
    # float32 rounding: the two half-batch sums and the all-reduce add in another order.
    _check_ddp_matches_single_process("gloo", _ddp_config("cpu"), tmp_path, tol=1e-5)


@needs_2_gpus
def test_ddp_nccl_two_gpus_match_single_gpu(tmp_path):
    # float32 (TF32 off); cuDNN's and alexop's reductions run in other orders on other shapes.
    _check_ddp_matches_single_process("nccl", _ddp_config("cuda"), tmp_path, tol=1e-4)


@needs_2_gpus
def test_alexop_runs_on_the_tensors_device():
    with torch.cuda.device(0):  # cuda:0 current, the tensors on cuda:1
        x, w, b = make_inputs(2, 3, 16, 67, 59, device="cuda:1")
        w.requires_grad_()
        b.requires_grad_()
        y = alexop.conv11s4(x, w, b)
        assert y.device == torch.device("cuda", 1)
        assert_matches(y, reference(x, w, b), torch.float32)
        dy = torch.randn_like(y)
        gw, gb = torch.autograd.grad(y, (w, b), dy)
        w64, b64 = w.detach().double().cpu().requires_grad_(), b.detach().double().cpu().requires_grad_()
        ref = F.conv2d(x.double().cpu(), w64, b64, stride=4, padding=2)
        rw, rb = torch.autograd.grad(ref, (w64, b64), dy.double().cpu())
        assert gw.device == gb.device == torch.device("cuda", 1)
        assert rel_l2(gw, rw) <= 1e-5 and rel_l2(gb, rb) <= 1e-5
        # The input gradient too, and a module moved to cuda:1.
        xg = x.clone().requires_grad_()
        (gx,) = torch.autograd.grad(alexop.conv11s4(xg, w.detach(), b.detach()), (xg,), dy)
        x64 = x.double().cpu().requires_grad_()
        (rx,) = torch.autograd.grad(F.conv2d(x64, w64.detach(), b64.detach(), stride=4, padding=2), (x64,), dy.double().cpu())
        assert gx.device == torch.device("cuda", 1) and rel_l2(gx, rx) <= 1e-5
        conv = alexop.Conv11s4(3, 16).to("cuda:1")
        assert conv(x).device == torch.device("cuda", 1)
        torch.cuda.synchronize(1)
        assert torch.cuda.current_device() == 0


# --------------------------------------------------------------------------- #
# CUDA graphs
# --------------------------------------------------------------------------- #


def _small_net():
    torch.manual_seed(0)
    return nn.Sequential(
        alexop.Conv11s4(3, 32, padding=2), nn.ReLU(), nn.MaxPool2d(3, 2), nn.Flatten(), nn.Linear(32 * 7 * 7, 10)
    ).cuda()


FP32 = T.Config(device="cuda", tf32=False, cudnn_benchmark=False)


@needs_cuda
def test_compile_reduce_overhead_training_step_matches_eager():
    from torch._dynamo.utils import counters

    counters.clear()
    torch._dynamo.reset()
    with T.precision(FP32):
        model, ref = _small_net(), _small_net()
        opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
        ref_opt = torch.optim.SGD(ref.parameters(), lr=0.05, momentum=0.9)
        compiled = torch.compile(model, mode="reduce-overhead", fullgraph=True)
        g = torch.Generator(device="cuda").manual_seed(0)
        for step in range(5):  # warm-up, recording, then replays of the CUDA graphs
            x = torch.randn(8, 3, 63, 63, device="cuda", generator=g)
            y = torch.randint(10, (8,), device="cuda", generator=g)
            torch.compiler.cudagraph_mark_step_begin()
            loss = F.cross_entropy(compiled(x), y)
            loss.backward()
            ref_loss = F.cross_entropy(ref(x), y)
            ref_loss.backward()
            assert rel_l2(loss, ref_loss) <= 1e-5, step
            for (n, p), q in zip(model.named_parameters(), ref.parameters()):
                assert rel_l2(p.grad, q.grad) <= 1e-4, (step, n)
            opt.step()
            ref_opt.step()
            opt.zero_grad(set_to_none=True)
            ref_opt.zero_grad(set_to_none=True)
    assert counters["inductor"].get("cudagraph_skips", 0) == 0, dict(counters["inductor"])
    torch._dynamo.reset()


@needs_cuda
def test_manual_cuda_graph_forward_backward_matches_eager():
    with T.precision(FP32):
        model = _small_net()
        params = list(model.parameters())
        # The input needs a gradient too, so the capture covers both backward ops.
        static_x = torch.randn(8, 3, 63, 63, device="cuda", requires_grad=True)
        static_y = torch.randint(10, (8,), device="cuda")

        def forward_backward():
            loss = F.cross_entropy(model(static_x), static_y)
            loss.backward()
            return loss

        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):  # warm-up on a side stream, as torch.cuda.graphs requires
            for _ in range(3):
                model.zero_grad(set_to_none=True)
                static_x.grad = None
                forward_backward()
        torch.cuda.current_stream().wait_stream(side)
        model.zero_grad(set_to_none=True)
        static_x.grad = None
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            static_loss = forward_backward()
        static_grads = [p.grad for p in params] + [static_x.grad]

        g = torch.Generator(device="cuda").manual_seed(1)
        for i in range(3):
            x = torch.randn(8, 3, 63, 63, device="cuda", generator=g)
            y = torch.randint(10, (8,), device="cuda", generator=g)
            with torch.no_grad():
                static_x.copy_(x)
                static_y.copy_(y)
            graph.replay()
            x.requires_grad_()
            loss = F.cross_entropy(model(x), y)
            want = torch.autograd.grad(loss, params + [x])
            # The same kernels replayed: equal up to the order of atomic adds.
            assert rel_l2(static_loss, loss) <= 1e-5, i
            for got, ref in zip(static_grads, want):
                assert rel_l2(got, ref) <= 1e-5, i
