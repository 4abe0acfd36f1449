"""The audit's engine-source cache (capture.Session serving the wheel's files from disk): processes serving the same
files into one empty folder at once all succeed with whole files, and the files follow --cache-dir (the compile's
cache), also where a compile re-imports the engine's module (tileprobe.audit.loader's stub)."""

from __future__ import annotations

import multiprocessing
from pathlib import Path

import pytest

from tileprobe.audit import capture, kernels, loader
from tileprobe.backends.triton import source as src_mod
from tileprobe.targets import profile

MODULE = "eng/ops/mod.py"
TEXT = "import os\n\nif os.environ.get('X'):\n    A = 1\nelse:\n    A = 2\n\n" + "B = 'x' * 100\n" * 400
# configs two folders down (as vLLM's mamba configs/selective_state_update/*.json): served beside the module one by one
DATA = {f"eng/ops/configs/kind{i % 4}/c{i}.json": '{"k": %d, "pad": "%s"}' % (i, "y" * 20000) for i in range(80)}


class _Wheel:
    """An engine source of one module and the JSON configs beside it (what capture.Session reads of a wheel)."""

    def read_text(self, rel: str) -> str:
        return TEXT if rel == MODULE else DATA[rel]

    def files_under(self, prefix: str) -> list[str]:
        return [n for n in (MODULE, *DATA) if n.startswith(prefix.rstrip("/") + "/")]


def _serve(folder: str, barrier, out) -> None:
    try:
        barrier.wait(timeout=30)
        session = capture.Session(_Wheel(), None, frozenset(), {}, Path(folder))
        out.put(("ok", session.file_of(MODULE.removesuffix(".py").replace("/", "."))))
    except BaseException as exc:  # noqa: BLE001 - the test reports what failed
        out.put(("error", f"{type(exc).__name__}: {exc}"))


@pytest.mark.parametrize("trial", range(3))
def test_processes_serving_the_same_files_into_an_empty_cache_all_succeed(tmp_path, trial):
    ctx = multiprocessing.get_context("fork")
    n = 6
    barrier, out = ctx.Barrier(n), ctx.Queue()
    procs = [ctx.Process(target=_serve, args=(str(tmp_path / "audit-src"), barrier, out)) for _ in range(n)]
    for p in procs:
        p.start()
    got = [out.get(timeout=60) for _ in procs]
    for p in procs:
        p.join(timeout=30)
    assert [g for g in got if g[0] != "ok"] == [], got
    assert len({path for _, path in got}) == 1
    served = Path(got[0][1])
    assert served.read_text() == TEXT
    for rel, text in DATA.items():  # the configs beside it, whole
        assert (served.parent / rel.removeprefix("eng/ops/")).read_text() == text
    assert not [f for f in tmp_path.rglob("*") if f.name.endswith(".tmp")]  # no temporary file left


def test_a_compile_that_reimports_the_engine_module_serves_it_into_its_own_cache(vllm, tmp_path, monkeypatch):
    monkeypatch.setenv("TILEPROBE_CACHE_DIR", str(tmp_path / "default"))
    monkeypatch.setattr(src_mod, "_LOADED", {})  # loaded here, not found from an earlier test's load
    entry = kernels.KERNELS["vllm-mamba2-selective-state-update"]
    stub = loader.module_source(entry, vllm, profile("rtx-pro-6000"), "_selective_scan_update_kernel")
    kernel = src_mod.load(stub, tmp_path / "mine")
    assert kernel is not None
    assert list((tmp_path / "mine" / "audit-src").rglob("mamba_ssm.py"))
    assert not (tmp_path / "default" / "audit-src").exists()
