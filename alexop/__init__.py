"""alexop: AlexNet's first convolution (11x11 kernel, stride 4) as a PyTorch operator.

Importing the package loads the compiled library (see ``library_path``), which
registers ``torch.ops.alexop.conv11s4`` and its backward ops with CPU, CUDA,
Meta, Autograd and Autocast kernels.
"""

from ._library import library_path
from .ops import Conv11s4, conv11s4, convert, kernel_for

__all__ = ["Conv11s4", "conv11s4", "convert", "kernel_for", "library_path"]
__version__ = "0.1.0"
