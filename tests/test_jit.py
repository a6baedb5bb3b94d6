"""TorchScript: script the function and the module, save, load and run in a fresh process."""

import subprocess
import sys
import textwrap

import pytest
import torch

import alexop
from conftest import DEVICES, REL_L2, Net, make_inputs, reference, rel_l2


@pytest.mark.parametrize("device", DEVICES)
def test_script_function(device):
    scripted = torch.jit.script(alexop.conv11s4)
    x, wt, b = make_inputs(2, 3, 8, 35, 35, device=device)
    assert rel_l2(scripted(x, wt, b, 1), reference(x, wt, b, 1)) <= REL_L2[torch.float32]
    assert rel_l2(scripted(x, wt), reference(x, wt)) <= REL_L2[torch.float32]


def test_script_module_save_load_in_fresh_process(tmp_path):
    torch.manual_seed(0)

    net = Net()
    scripted = torch.jit.script(net)
    path = tmp_path / "net.pt"
    scripted.save(str(path))
    x = torch.rand(3, 3, 67, 67)
    torch.save({"x": x, "y": net(x).detach(), "w": net.conv.weight.detach()}, tmp_path / "io.pt")

    # A fresh interpreter that imports only torch and alexop, then trains one step in TorchScript.
    code = textwrap.dedent(
        f"""
        import torch, alexop
        m = torch.jit.load({str(path)!r})
        io = torch.load({str(tmp_path / "io.pt")!r})
        y = m(io["x"])
        assert torch.allclose(y, io["y"], atol=1e-5, rtol=1e-5), (y - io["y"]).abs().max()
        y.square().sum().backward()
        g = m.conv.weight.grad
        assert g is not None and g.shape == io["w"].shape and torch.isfinite(g).all()
        print("ok")
        """
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "ok"
