"""Every module of the package imports on its own (no hidden import cycles), and none hides an import in a function
to dodge one."""

import ast
import json
import pkgutil
import subprocess
import sys
from pathlib import Path

import tileprobe

MODULES = sorted(m.name for m in pkgutil.walk_packages(tileprobe.__path__, "tileprobe.") if m.name != "tileprobe.__main__")

# One interpreter imports what tileprobe's modules import from outside the package (the standard library and the
# third-party packages: an import cycle is among tileprobe's own modules), then forks once per module: the child
# imports that module, as `python -c "import <module>"` would, with no tileprobe module loaded before it.
_FORKER = """
import importlib, json, os, sys, traceback
outside, modules = json.loads(sys.stdin.read())
assert not any(m == "tileprobe" or m.startswith("tileprobe.") for m in sys.modules), "tileprobe loaded before the forks"
for name in outside:
    try:
        importlib.import_module(name)
    except Exception:
        pass  # an optional dependency that is not installed: the module that needs it says so below
failed = {}
for name in modules:
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        try:
            importlib.import_module(name)
            msg = ""
        except BaseException:
            msg = traceback.format_exc()[-800:]
        os.write(w, msg.encode())
        os._exit(0)
    os.close(w)
    with os.fdopen(r, "rb") as f:
        msg = f.read().decode()
    _, status = os.waitpid(pid, 0)
    if msg or status:
        failed[name] = msg or f"the import ended with status {status}"
print(json.dumps(failed))
"""


def _outside_imports() -> list[str]:
    """The top-level names tileprobe's modules import at module level from outside the package."""
    names = set()
    for path in Path(tileprobe.__file__).parent.rglob("*.py"):
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, ast.Import):
                names |= {a.name.split(".")[0] for a in node.names}
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names.add(node.module.split(".")[0])
    return sorted(names - {"tileprobe", "__future__"})


def test_every_module_imports_alone():
    assert len(MODULES) > 100
    p = subprocess.run([sys.executable, "-c", _FORKER], input=json.dumps([_outside_imports(), MODULES]),
                       capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr[-2000:]
    failed = json.loads(p.stdout.splitlines()[-1])
    assert not failed, "\n\n".join(f"{name}:\n{err}" for name, err in failed.items())


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
