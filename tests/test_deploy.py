"""Deployment without Python: AOTInductor packages, and C++ processes (examples/cpp)
running TorchScript and AOTInductor models that call alexop.

The C++ program, alexop_runner, is built once per run of this module with CMake
against the libtorch inside the installed torch package; those tests skip when
cmake or a C++ compiler is missing (and fail then with ALEXOP_REQUIRE_CPP=1). Tensors go to it with torch.save and come
back written by torch::jit::pickle_save.

C++ runs the same kernels as Python, so its results must equal Python's up to
float32 rounding: |cpp - python| <= 1e-5 * |python| + 1e-6 * max|python|,
elementwise (assert_same_float32); forward outputs are also checked against the
float64 F.conv2d reference like every other test.
"""

import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import warnings
import zipfile
from pathlib import Path

import pytest
import torch

import alexop
from conftest import DEVICES, REL_L2, Net, Stem, reference, rel_l2

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "cpp"

# AOTInductor and a C++ build: the long end of the suite (scripts/gpu_check.sh and CI run them).
pytestmark = pytest.mark.slow


# ---------------------------------------------------------------------------
# Stem and Net (tests/conftest.py) are made tiny: AOTInductor compiles C++ too.


def image(n, seed=0, device="cpu"):
    return torch.rand(n, 3, 35, 35, generator=torch.Generator().manual_seed(seed)).to(device)


def assert_same_float32(cpp, python):
    """C++ and Python results agree up to float32 rounding."""
    python = python.detach().cpu()
    assert cpp.shape == python.shape and cpp.dtype == python.dtype
    scale = python.abs().max().item()
    torch.testing.assert_close(cpp, python, rtol=1e-5, atol=1e-6 * scale)


# ---------------------------------------------------------------------------
# AOTInductor in Python.


@pytest.fixture(scope="module", params=DEVICES)
def stem_package(request, tmp_path_factory):
    """(model, .pt2 path) of a Stem exported with a dynamic batch and compiled by AOTInductor."""
    device = request.param
    torch.manual_seed(0)
    model = Stem(4).to(device).eval()
    batch = torch.export.Dim("batch", min=1, max=64)
    exported = torch.export.export(model, (image(2, device=device),), dynamic_shapes={"x": {0: batch}})
    # The exported graph keeps the operator itself, not a decomposition into aten.convolution.
    targets = {n.target for n in exported.graph_module.graph.nodes if n.op == "call_function"}
    assert torch.ops.alexop.conv11s4.default in targets
    path = tmp_path_factory.mktemp(f"aoti_{device}") / "stem.pt2"
    # Precompiled headers cost ~15 s of the first compile on a 2-core machine; a test gains nothing from them.
    with torch._inductor.config.patch({"aot_inductor.precompile_headers": False}):
        torch._inductor.aoti_compile_and_package(exported, package_path=str(path))
    return model, path


def test_aoti_package_calls_alexop(stem_package):
    # The compiled wrapper hands the node to alexop's registered kernel through
    # the proxy executor, by schema name: a process running the package must
    # have alexop's library loaded.
    _, path = stem_package
    with zipfile.ZipFile(path) as archive:
        extern_nodes = [json.loads(archive.read(n)) for n in archive.namelist() if n.endswith(".wrapper.json")]
        wrappers = [archive.read(n).decode() for n in archive.namelist() if n.endswith(".wrapper.cpp")]
    assert len(extern_nodes) == 1 and len(wrappers) == 1
    assert [n["node"]["target"] for n in extern_nodes[0]["nodes"]] == ["alexop::conv11s4"]
    assert "aoti_torch_proxy_executor_call_function" in wrappers[0]
    assert "convolution" not in wrappers[0]


def _compiler_libstdcxx():
    cxx = shutil.which(os.environ.get("CXX", "c++"))
    if cxx is None:
        return None
    lib = subprocess.run([cxx, "-print-file-name=libstdc++.so.6"], capture_output=True, text=True).stdout.strip()
    return lib if os.path.isabs(lib) else None


def test_aoti_load_package_matches_reference(stem_package, tmp_path):
    # Loaded in a child process, so that a crash fails this test instead of
    # ending the run. On the GPU machine (torch 2.11 wheel, packages compiled
    # by GCC 13) aoti_load_package segfaults on any package, one without
    # alexop too (dev notes: a plain nn.Conv2d package crashed the same way
    # and loaded once the compiler's libstdc++ was preloaded). That is the
    # environment's libstdc++ clash, not alexop's: the test then retries
    # with LD_PRELOAD and still checks every output.
    model, path = stem_package
    device = next(model.parameters()).device
    inputs = {n: image(n, seed=n, device=device) for n in (1, 3, 5)}
    torch.save({n: x.cpu() for n, x in inputs.items()}, tmp_path / "inputs.pt")
    code = (
        "import sys, torch, alexop\n"
        "runner = torch._inductor.aoti_load_package(sys.argv[1])\n"
        "xs = torch.load(sys.argv[2])\n"
        "torch.save({n: runner(x.to(sys.argv[4])).cpu() for n, x in xs.items()}, sys.argv[3])\n"
    )
    command = [sys.executable, "-c", code, str(path), str(tmp_path / "inputs.pt"), str(tmp_path / "out.pt"), str(device)]
    result = subprocess.run(command, capture_output=True, text=True, timeout=600)
    libstdcxx = _compiler_libstdcxx()
    if result.returncode == -signal.SIGSEGV and libstdcxx is not None:
        result = subprocess.run(
            command, capture_output=True, text=True, timeout=600, env=dict(os.environ, LD_PRELOAD=libstdcxx)
        )
        if result.returncode == 0:
            warnings.warn(
                f"aoti_load_package segfaulted in this Python and ran with LD_PRELOAD={libstdcxx} "
                "(a libstdc++ clash of the torch install; README, Known problems)"
            )
    assert result.returncode == 0, result.stderr[-3000:]
    outputs = torch.load(tmp_path / "out.pt")
    for n, x in inputs.items():
        assert outputs[n].shape == (n, 4, 8, 8)
        want = reference(x, model.conv.weight, model.conv.bias).relu()
        assert rel_l2(outputs[n], want) <= REL_L2[torch.float32], n


# ---------------------------------------------------------------------------
# The C++ program.


def _build(build_dir, state):
    """Configures and builds examples/cpp in build_dir; state["step"] = (command, returncode, output) of the last step run."""
    configure = [
        "cmake", "-S", str(EXAMPLE), "-B", str(build_dir),
        f"-DCMAKE_PREFIX_PATH={torch.utils.cmake_prefix_path}",
        f"-DALEXOP_LIBRARY={alexop.library_path()}",
    ]  # fmt: skip
    for command in (configure, ["cmake", "--build", str(build_dir), "-j2"]):
        if state["cancelled"]:
            return
        state["process"] = subprocess.Popen(
            command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True
        )
        output, _ = state["process"].communicate()
        state["step"] = (command, state["process"].returncode, output)
        if state["process"].returncode != 0:
            return


@pytest.fixture(scope="module", autouse=True)
def _cpp_build(tmp_path_factory):
    """Starts building alexop_runner in the background as soon as this module's tests start,
    so that the build (one core) overlaps the AOTInductor compilation; stops it if no test needed it."""
    missing = [tool for tool in ("cmake",) if shutil.which(tool) is None]
    if not any(shutil.which(c) for c in (os.environ.get("CXX", "c++"), "c++", "g++", "clang++")):
        missing.append("a C++ compiler (c++, g++, clang++ or $CXX)")
    if missing:
        yield {"skip": "building the C++ example (examples/cpp) needs " + " and ".join(missing)}
        return
    build_dir = tmp_path_factory.mktemp("alexop_runner")
    state = {"dir": build_dir, "cancelled": False, "process": None}
    thread = threading.Thread(target=_build, args=(build_dir, state), daemon=True)
    state["thread"] = thread
    thread.start()
    yield state
    state["cancelled"] = True
    if thread.is_alive() and state["process"] is not None:
        os.killpg(state["process"].pid, signal.SIGTERM)  # cmake and the make/compiler under it
    thread.join()


@pytest.fixture(scope="module")
def alexop_runner(_cpp_build):
    """Path of the built examples/cpp program (its default library: alexop.library_path())."""
    if "skip" in _cpp_build:
        # CI sets ALEXOP_REQUIRE_CPP=1 so that a missing tool fails instead of skipping.
        if os.environ.get("ALEXOP_REQUIRE_CPP") == "1":
            pytest.fail(_cpp_build["skip"] + " (ALEXOP_REQUIRE_CPP=1)")
        pytest.skip(_cpp_build["skip"])
    _cpp_build["thread"].join()
    command, returncode, output = _cpp_build["step"]
    assert returncode == 0, f"building examples/cpp failed: {' '.join(command)}\n{output}"
    return _cpp_build["dir"] / "alexop_runner"


def run_cpp(program, *args, env=None):
    """Runs alexop_runner without ALEXOP_LIBRARY in its environment unless env gives it."""
    environ = {k: v for k, v in os.environ.items() if k != "ALEXOP_LIBRARY"}
    environ.update(env or {})
    return subprocess.run([str(program), *map(str, args)], capture_output=True, text=True, timeout=300, env=environ)


def run_cpp_ok(program, *args, out, env=None):
    result = run_cpp(program, *args, env=env)
    assert result.returncode == 0, f"alexop_runner failed:\n{result.stdout}\n{result.stderr}"
    assert "output norm" in result.stdout
    return dict(torch.load(out))


@pytest.fixture(scope="module")
def scripted_net(tmp_path_factory):
    """(eager Net on the CPU, path of its TorchScript file, path of an input saved with torch.save)."""
    torch.manual_seed(0)
    net = Net(4)
    directory = tmp_path_factory.mktemp("script")
    torch.jit.script(net).save(str(directory / "net.pt"))
    torch.save(image(3, seed=7), directory / "x.pt")
    return net, directory / "net.pt", directory / "x.pt"


@pytest.mark.parametrize("device", DEVICES)
def test_cpp_script_forward(alexop_runner, scripted_net, device, tmp_path):
    net, model, x_file = scripted_net
    out = tmp_path / "out.pt"
    got = run_cpp_ok(alexop_runner, "--device", device, "script", model, x_file, out, out=out)

    x = torch.load(x_file)
    python_net = torch.jit.load(str(model), map_location=device).eval()
    assert_same_float32(got["output"], python_net(x.to(device)))
    features = reference(x, net.conv.weight, net.conv.bias).relu().mean((2, 3))
    want = torch.nn.functional.linear(features, net.head.weight.double(), net.head.bias.double())
    assert rel_l2(got["output"], want) <= REL_L2[torch.float32]


@pytest.mark.parametrize("device", DEVICES)
def test_cpp_script_training_step_matches_python_gradients(alexop_runner, scripted_net, device, tmp_path):
    # Backward in C++ goes through alexop's C++ autograd kernel: gradients of the
    # input, of alexop's weight and bias, and of the layer after it.
    net, model, x_file = scripted_net
    out = tmp_path / "out.pt"
    got = run_cpp_ok(alexop_runner, "--device", device, "script", model, x_file, out, "--train", out=out)

    python_net = torch.jit.load(str(model), map_location=device).train()
    x = torch.load(x_file).to(device).requires_grad_()
    y = python_net(x)
    y.square().sum().backward()
    want = {"output": y, "grad.input": x.grad}
    want.update({f"grad.{name}": p.grad for name, p in python_net.named_parameters()})
    assert set(got) == set(want) == {
        "output", "grad.input", "grad.conv.weight", "grad.conv.bias", "grad.head.weight", "grad.head.bias"
    }
    for name in want:
        assert_same_float32(got[name], want[name])


@pytest.mark.parametrize("way", ["build default", "ALEXOP_LIBRARY", "--library"])
def test_cpp_library_from_flag_then_environment_then_build_default(alexop_runner, scripted_net, way, tmp_path):
    # The program was configured with -DALEXOP_LIBRARY=alexop.library_path();
    # $ALEXOP_LIBRARY overrides that, --library PATH overrides both.
    _, model, x_file = scripted_net
    other = tmp_path / "alexop_elsewhere.so"
    other.symlink_to(alexop.library_path())
    flag, env, loaded = {
        "build default": ([], {}, alexop.library_path()),
        "ALEXOP_LIBRARY": ([], {"ALEXOP_LIBRARY": str(other)}, str(other)),
        "--library": (["--library", other], {"ALEXOP_LIBRARY": str(tmp_path / "missing.so")}, str(other)),
    }[way]
    result = run_cpp(alexop_runner, *flag, "script", model, x_file, tmp_path / "out.pt", env=env)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[0] == f"loaded {loaded}"


def test_cpp_aoti_forward(alexop_runner, stem_package, tmp_path):
    model, package = stem_package
    device = next(model.parameters()).device.type
    x = image(5, seed=5)  # not the batch it was exported with
    torch.save(x, tmp_path / "x.pt")
    out = tmp_path / "out.pt"
    got = run_cpp_ok(alexop_runner, "--device", device, "aoti", package, tmp_path / "x.pt", out, out=out)
    assert_same_float32(got["output"], model(x.to(device)))
    assert rel_l2(got["output"], reference(x, model.conv.weight, model.conv.bias).relu()) <= REL_L2[torch.float32]


# ---------------------------------------------------------------------------
# What a C++ user sees when alexop's library is not loaded.

HINT = "load alexop's library (Python: alexop.library_path()) with --library PATH or ALEXOP_LIBRARY=PATH"


def test_cpp_without_library_script_load_fails_clearly(alexop_runner, scripted_net, tmp_path):
    _, model, x_file = scripted_net
    result = run_cpp(alexop_runner, "--library", "", "script", model, x_file, tmp_path / "out.pt")
    assert result.returncode == 1
    assert "Unknown builtin op: alexop::conv11s4" in result.stderr
    assert HINT in result.stderr
    assert not (tmp_path / "out.pt").exists()


def test_cpp_without_library_aoti_load_fails_clearly(alexop_runner, stem_package, tmp_path):
    _, package = stem_package
    torch.save(image(1), tmp_path / "x.pt")
    result = run_cpp(alexop_runner, "--library", "", "aoti", package, tmp_path / "x.pt", tmp_path / "out.pt")
    assert result.returncode == 1
    assert "Could not find schema for alexop::conv11s4" in result.stderr
    assert HINT in result.stderr
    assert not (tmp_path / "out.pt").exists()


def test_cpp_bad_library_path_fails_clearly(alexop_runner, scripted_net, tmp_path):
    _, model, x_file = scripted_net
    result = run_cpp(alexop_runner, "--library", tmp_path / "missing.so", "script", model, x_file, tmp_path / "out.pt")
    assert result.returncode == 1
    assert "could not load the alexop library" in result.stderr and "missing.so" in result.stderr
