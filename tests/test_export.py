"""torch.export: dynamic batch, .pt2 save/load, alexop ops kept in the graph."""

import pytest
import torch

from conftest import DEVICES, REL_L2, Stem, reference, rel_l2


def _alexop_targets(gm):
    return {n.target for n in gm.graph.nodes if n.op == "call_function" and "alexop" in str(n.target)}


@pytest.mark.parametrize("device", DEVICES)
def test_export_dynamic_batch_save_load(device, tmp_path):
    torch.manual_seed(0)
    model = Stem().to(device).eval()
    batch = torch.export.Dim("batch", min=1, max=1024)
    example = torch.rand(2, 3, 67, 67, device=device)
    exported = torch.export.export(model, (example,), dynamic_shapes={"x": {0: batch}})
    assert _alexop_targets(exported.graph_module) == {torch.ops.alexop.conv11s4.default}

    path = tmp_path / "stem.pt2"
    torch.export.save(exported, path)
    loaded = torch.export.load(path).module()
    for n in (1, 3, 5):
        x = torch.rand(n, 3, 67, 67, device=device)
        want = reference(x, model.conv.weight, model.conv.bias).relu()
        assert rel_l2(loaded(x), want) <= REL_L2[torch.float32]


@pytest.mark.parametrize("device", DEVICES)
def test_export_channels_last_model(device):
    """A channels_last model exports with a dynamic batch and returns channels_last results,
    as eager does."""
    torch.manual_seed(0)
    model = Stem().to(device).eval().to(memory_format=torch.channels_last)
    batch = torch.export.Dim("batch", min=2, max=1024)
    example = torch.rand(2, 3, 67, 67, device=device).to(memory_format=torch.channels_last)
    loaded = torch.export.export(model, (example,), dynamic_shapes={"x": {0: batch}}).module()
    for n in (2, 5):
        x = torch.rand(n, 3, 67, 67, device=device).to(memory_format=torch.channels_last)
        got = loaded(x)
        assert got.is_contiguous(memory_format=torch.channels_last) and not got.is_contiguous()
        want = reference(x, model.conv.weight, model.conv.bias).relu()
        assert rel_l2(got, want) <= REL_L2[torch.float32]


def test_export_training_graph_keeps_alexop_backward():
    torch.manual_seed(0)
    model = Stem().train()

    class Step(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.model = model

        def forward(self, x):
            loss = self.model(x).square().mean()
            return loss

    exported = torch.export.export(Step(), (torch.rand(2, 3, 67, 67),))
    decomposed = exported.run_decompositions()
    assert _alexop_targets(decomposed.graph_module) == {torch.ops.alexop.conv11s4.default}
