"""The Python API: a thin, typed layer over ``torch.ops.alexop``.

Every check lives in the C++ kernels, so eager calls, TorchScript, compiled
and exported graphs all raise the same errors.
"""

import math
from typing import Optional

import torch
from torch import Tensor, nn

from . import _library  # noqa: F401  (loads the operator library)

__all__ = ["Conv11s4", "conv11s4", "convert", "kernel_for"]

KERNEL_SIZE = 11
STRIDE = 4


def conv11s4(input: Tensor, weight: Tensor, bias: Optional[Tensor] = None, padding: int = 2) -> Tensor:
    """AlexNet's first convolution: ``F.conv2d(input, weight, bias, stride=4, padding=padding)``.

    Args:
        input: ``(N, C_in, H, W)``, any strides (NCHW, channels_last, views);
            ``H + 2 * padding >= 11`` and ``W + 2 * padding >= 11``.
        weight: ``(C_out, C_in, 11, 11)``, same dtype and device as ``input``.
        bias: optional ``(C_out,)``.
        padding: zero padding on every side, ``>= 0``.

    Returns:
        ``(N, C_out, (H + 2p - 11) // 4 + 1, (W + 2p - 11) // 4 + 1)``, always a
        contiguous NCHW tensor of the input's dtype.

    dtypes: float32 and float64 everywhere, float16 and bfloat16 too (computed
    in float32 on the CPU). On CUDA, float32 is computed to full float32
    accuracy unless ``torch.set_float32_matmul_precision("high")`` (or
    ``"medium"``) allows TF32 tensor cores.
    """
    return torch.ops.alexop.conv11s4(input, weight, bias, padding)


def kernel_for(input: Tensor, weight: Tensor, padding: int = 2) -> dict[str, str]:
    """The names of the kernels alexop runs for ``conv11s4(input, weight, bias, padding)``.

    Asks the same kernel choice the operators make, for the forward and both
    gradients, and launches nothing. The choice depends on the device (its
    architecture, SM count and shared memory), the dtype, float32's matmul
    precision (``torch.get_float32_matmul_precision()``), the shape, the
    input's memory layout and alignment, and the batch; bias does not change
    it. The gradients are named as autograd would call them, with a
    contiguous ``grad_output`` of the output's shape.

    Args:
        input: ``(N, C_in, H, W)``, as for :func:`conv11s4`.
        weight: ``(C_out, C_in, 11, 11)``, same dtype and device.
        padding: zero padding on every side, ``>= 0``.

    Returns:
        ``{"forward": ..., "weight_grad": ..., "input_grad": ...}``, e.g.
        ``"fwd_planes_bf16_c96"``, ``"wgrad_gmma_3xfp16_c96_vec"``,
        ``"dgrad_cublas_fold"`` on CUDA, ``"cpu_gemm"`` on the CPU;
        ``"none"`` where an empty result needs no kernel.
    """
    forward, weight_grad, input_grad = torch.ops.alexop._kernel_for(input, weight, padding)
    return {"forward": forward, "weight_grad": weight_grad, "input_grad": input_grad}


class Conv11s4(nn.Module):
    """``nn.Conv2d(in_channels, out_channels, 11, stride=4, padding=padding)`` on alexop.

    Its parameters and state_dict are those of the equivalent ``nn.Conv2d``
    (``weight`` of shape ``(out, in, 11, 11)``, optional ``bias``), initialised
    the same way, so the two load each other's checkpoints.
    """

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        padding: int = 2,
        bias: bool = True,
        device=None,
        dtype=None,
    ) -> None:
        super().__init__()
        if in_channels < 1 or out_channels < 1:
            raise ValueError(
                f"Conv11s4 needs at least one input and one output channel, got "
                f"in_channels={in_channels}, out_channels={out_channels}"
            )
        if padding < 0:
            raise ValueError(f"Conv11s4 needs padding >= 0, got {padding}")
        factory = {"device": device, "dtype": dtype}
        self.in_channels = in_channels
        self.out_channels = out_channels
        self.padding = padding
        self.weight = nn.Parameter(torch.empty(out_channels, in_channels, KERNEL_SIZE, KERNEL_SIZE, **factory))
        if bias:
            self.bias = nn.Parameter(torch.empty(out_channels, **factory))
        else:
            self.register_parameter("bias", None)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        # nn.Conv2d's initialisation, so a fresh module is a drop-in replacement.
        nn.init.kaiming_uniform_(self.weight, a=math.sqrt(5))
        if self.bias is not None:
            bound = 1 / math.sqrt(self.in_channels * KERNEL_SIZE * KERNEL_SIZE)
            nn.init.uniform_(self.bias, -bound, bound)

    def forward(self, input: Tensor) -> Tensor:
        return conv11s4(input, self.weight, self.bias, self.padding)

    def extra_repr(self) -> str:
        return (
            f"{self.in_channels}, {self.out_channels}, kernel_size=(11, 11), stride=(4, 4), "
            f"padding={self.padding}, bias={self.bias is not None}"
        )

    @staticmethod
    def eligible(conv: nn.Module) -> bool:
        """Whether ``conv`` computes exactly what a ``Conv11s4`` computes."""
        return (
            isinstance(conv, nn.Conv2d)
            and tuple(conv.kernel_size) == (KERNEL_SIZE, KERNEL_SIZE)
            and tuple(conv.stride) == (STRIDE, STRIDE)
            and tuple(conv.dilation) == (1, 1)
            and conv.groups == 1
            and conv.padding_mode == "zeros"
            and _symmetric_padding(conv.padding) is not None
        )

    @classmethod
    def from_conv2d(cls, conv: nn.Conv2d) -> "Conv11s4":
        """A ``Conv11s4`` that shares ``conv``'s parameters (optimizers keep working).

        Raises ``ValueError`` unless ``conv`` is an 11x11, stride-4, dilation-1,
        ungrouped ``nn.Conv2d`` with the same zero padding on every side.
        """
        if not cls.eligible(conv):
            raise ValueError(
                "Conv11s4.from_conv2d needs an nn.Conv2d with kernel_size 11, stride 4, "
                f"dilation 1, groups 1 and the same zero padding on every side; got {conv!r}"
            )
        padding = _symmetric_padding(conv.padding)
        assert padding is not None
        # Built on the meta device, then given conv's own parameters.
        module = cls(conv.in_channels, conv.out_channels, padding, conv.bias is not None, device="meta")
        module.weight = conv.weight
        module.bias = conv.bias
        module.train(conv.training)
        return module


def _symmetric_padding(padding) -> Optional[int]:
    if padding == "valid":
        return 0
    if isinstance(padding, str):
        return None
    if len(set(padding)) == 1 and int(padding[0]) >= 0:
        return int(padding[0])
    return None


def convert(model: nn.Module) -> nn.Module:
    """Replaces every eligible ``nn.Conv2d`` in ``model`` by a ``Conv11s4``, in place.

    Eligible: 11x11 kernel, stride 4, dilation 1, groups 1, zero padding equal on
    every side (``Conv11s4.eligible``). Other modules are left alone; parameters
    are shared, not copied. Returns the model (or the replacement, when ``model``
    itself is an eligible ``nn.Conv2d``).
    """
    if Conv11s4.eligible(model):
        return Conv11s4.from_conv2d(model)  # type: ignore[arg-type]
    for name, child in model.named_children():
        replacement = convert(child)
        if replacement is not child:
            setattr(model, name, replacement)
    return model
