"""The stub a module-compiled launch is loaded through (tileprobe.audit.loader) works for an installed engine, not
only a wheel: the installed package's folder is the engine's files, never read as a folder of wheels (which failed
every stub compile with "no vllm wheel in <site-packages>/vllm")."""

from __future__ import annotations

import zipfile

import pytest

from tileprobe.audit import loader
from tileprobe.audit.kernels import KERNELS
from tileprobe.engines.triton_configs import EngineSource, find_engine
from tileprobe.errors import UsageError
from tileprobe.targets import profile


def test_a_module_stub_of_an_installed_engine_loads_its_kernel(tmp_path, rng):
    try:
        wheel = find_engine("vllm")
    except UsageError as exc:
        pytest.skip(f"no vllm wheel: {exc}")
    site = tmp_path / "site-packages"
    with zipfile.ZipFile(wheel.origin) as z:  # the engine's Python as pip would install it (its .so files left out)
        z.extractall(site, [n for n in z.namelist() if n.startswith("vllm/") and n.endswith(".py")])
    src = EngineSource("vllm", wheel.version, str(site / "vllm"), "installed")
    entry = KERNELS["vllm-unified-attention"]
    target = profile(rng.choice(["rtx-pro-6000", "h200"]))
    stub = loader.module_source(entry, src, target, "kernel_unified_attention")
    assert "installed=" in stub.text, stub.text
    namespace: dict = {}
    exec(compile(stub.text, "<stub>", "exec"), namespace)  # noqa: S102 - the stub tileprobe's compile loads
    fn = namespace["kernel_unified_attention"]
    assert type(fn).__name__ == "JITFunction" and fn.fn.__name__ == "kernel_unified_attention"
