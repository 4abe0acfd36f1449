"""LazyModule: third-party modules at first use, never a tileprobe module (so no import cycle can hide in one)."""

import subprocess
import sys

import pytest

from tileprobe.lazy import LazyModule


def test_imports_on_first_attribute_and_runs_hooks_in_order():
    code = ("import sys\nfrom tileprobe.lazy import LazyModule\n"
            "m = LazyModule('fractions', before=lambda: print('before', 'fractions' in sys.modules),\n"
            "               after=lambda mod: print('after', mod.__name__))\n"
            "print('idle', 'fractions' in sys.modules)\nprint(m.Fraction(1, 3) + m.Fraction(1, 6))\n")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    calls = p.stdout.split()
    assert p.returncode == 0, p.stderr
    assert calls == ["idle", "False", "before", "False", "after", "fractions", "1/2"], calls


def test_missing_module_says_why_and_tileprobe_modules_are_refused():
    m = LazyModule("tileprobe_no_such_module_xyz")
    assert m.missing().startswith("ModuleNotFoundError")
    with pytest.raises(ModuleNotFoundError):
        m.anything  # noqa: B018
    with pytest.raises(ValueError):
        LazyModule("tileprobe.reports.report")
