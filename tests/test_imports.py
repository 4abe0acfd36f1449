"""Every module of the package imports on its own (no hidden import cycles), and none hides an import in a function
to dodge one."""

import pkgutil
import subprocess
import sys
from pathlib import Path

import pytest

import tileprobe

MODULES = sorted(m.name for m in pkgutil.walk_packages(tileprobe.__path__, "tileprobe.") if m.name != "tileprobe.__main__")


@pytest.mark.parametrize("name", MODULES)
def test_module_imports_alone(name):
    p = subprocess.run([sys.executable, "-c", f"import {name}"], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr[-800:]


def test_no_function_local_imports_dodge_cycles():
    root = Path(tileprobe.__file__).parent
    hits = [f"{p}:{i}" for p in root.rglob("*.py") for i, line in enumerate(p.read_text().splitlines(), 1)
            if "noqa: PLC0415" in line]
    assert not hits, hits


def test_operand_widths_are_defined_once():
    """ACT_BITS / WEIGHT_BITS: one definition (tileprobe.dtypes); the family and the model import it."""
    import re

    root = Path(tileprobe.__file__).parent
    for name in ("ACT_BITS", "WEIGHT_BITS"):
        defs = [f"{p.relative_to(root)}:{i}" for p in root.rglob("*.py")
                for i, line in enumerate(p.read_text().splitlines(), 1) if re.match(rf"\s*{name}\s*(:[^=]*)?=", line)]
        assert defs == ["dtypes.py:" + str(next(i for i, line in enumerate(
            (root / "dtypes.py").read_text().splitlines(), 1) if line.startswith(name)))], defs
