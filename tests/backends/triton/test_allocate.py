"""tileprobe.backends.triton.allocate: Triton's own stages stopped at its shared-memory allocation give the bytes the
whole compile gives (metadata.shared), on launches drawn at random each run; another make_llir, or another release,
is refused with the reason, and a sized job is its own cache entry with no registers claimed."""

from __future__ import annotations

import pytest

from _engine_exec import engine_source_or_skip
from tileprobe.backends.triton import allocate
from tileprobe.backends.triton.compile import TritonBuild, compile_many
from tileprobe.backends.triton.toolchain import installed
from tileprobe.families import triton_moe as tm
from tileprobe.workloads import PRESETS

ARCHS = (89, 90, 100, 120, 121)


def _launch(rng, engine, ks):
    model = rng.choice(list(PRESETS.values()))
    tp = rng.choice([t for t in (1, 2, 4, 8) if model.inter % t == 0])
    gemm = rng.choice(tm.GEMMS)
    n, k = tm.gemm_shape(gemm, model.hidden, model.inter // tp)
    entry = {"BLOCK_SIZE_M": rng.choice([16, 32, 64, 128]), "BLOCK_SIZE_N": rng.choice([32, 64, 128, 256]),
             "BLOCK_SIZE_K": rng.choice([32, 64, 128, 256]), "GROUP_SIZE_M": rng.choice([1, 8, 16]),
             "num_warps": rng.choice([4, 8]), "num_stages": rng.choice([1, 2, 3, 4, 5])}
    return tm.launch_job(engine, ks, rng.choice(tm.QUANTS), gemm, model.experts, n, k, rng.choice([1, 8, 64, 512]),
                         model.top_k, entry, rng.choice(ARCHS))


@pytest.mark.triton
@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_the_allocation_alone_gives_the_compiles_bytes(engine, rng, tmp_path):
    if allocate.unavailable():
        pytest.skip(allocate.unavailable())
    _, ks = engine_source_or_skip(engine)
    jobs = [_launch(rng, engine, ks) for _ in range(3)]
    sized = compile_many([j.sized() for j in jobs], 1, tmp_path)
    full = compile_many(jobs, 1, tmp_path)
    for job, s, f in zip(jobs, sized, full):
        assert isinstance(f, TritonBuild), (job.kwargs, f)
        assert isinstance(s, TritonBuild) and s.sized and not f.sized, (job.kwargs, s)
        assert s.shared == f.shared and (s.num_warps, s.num_stages) == (f.num_warps, f.num_stages), (job.kwargs, s, f)
        assert s.regs is None and s.spills is None and f.regs, (s, f)  # no cubin: no registers claimed
        assert job.sized().key(installed().version) != job.key(installed().version)


def test_another_make_llir_or_release_is_refused(monkeypatch, rng):
    pytest.importorskip("triton")
    version = installed().version if installed() else None
    if version not in allocate.CHECKED:
        assert "checked on Triton" in allocate.unavailable()
        return
    assert allocate.unavailable() is None
    other = "%064x" % rng.randrange(16**64)
    monkeypatch.setitem(allocate.CHECKED, version, other)
    assert "not the one the allocation prefix was copied from" in allocate.unavailable()
    monkeypatch.delitem(allocate.CHECKED, version)
    assert f"not {version}" in allocate.unavailable()
    with pytest.raises(allocate.CannotSize):
        allocate.shared_bytes(None, None, {})
