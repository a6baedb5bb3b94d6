import importlib.machinery
from functools import lru_cache
from pathlib import Path

import torch

_HERE = Path(__file__).resolve().parent


@lru_cache(maxsize=None)
def library_path() -> str:
    """The path of the compiled alexop library (``alexop/_C*.so``).

    It holds no Python symbols, so C++ programs can load it (``dlopen``, or link
    it with ``-Wl,--no-as-needed``) to register ``alexop::conv11s4`` before running
    TorchScript or AOTInductor models that use it.
    """
    for suffix in importlib.machinery.EXTENSION_SUFFIXES:
        candidate = _HERE / f"_C{suffix}"
        if candidate.is_file():
            return str(candidate)
    raise ImportError(
        f"alexop's compiled library (_C*.so) was not found in {_HERE}; build it with "
        "`pip install --no-build-isolation -e .` from the source checkout"
    )


torch.ops.load_library(library_path())
