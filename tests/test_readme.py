"""Every Python example in README.md runs as written (on the CPU when there is no GPU)."""

import re
from pathlib import Path

import pytest
import torch

README = Path(__file__).resolve().parents[1] / "README.md"
BLOCKS = re.findall(r"```python\n(.*?)```", README.read_text(), re.S)


def test_readme_has_python_examples():
    assert len(BLOCKS) >= 2


@pytest.mark.parametrize("index", range(len(BLOCKS)))
def test_readme_example_runs(index, tmp_path, monkeypatch):
    code = BLOCKS[index]
    if not torch.cuda.is_available():
        code = code.replace('"cuda"', '"cpu"')
    monkeypatch.chdir(tmp_path)  # examples may write files (torch.export.save)
    exec(compile(code, f"README.md python block {index + 1}", "exec"), {"__name__": "__readme__"})
