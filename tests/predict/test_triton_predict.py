"""The triton-moe predictor equals Triton's compiled bytes where it answers, and says CannotPredict elsewhere.

Random launches (engine, quant incl. fp8 block, arch among sm_89 / sm_90 / sm_100 / sm_120, the config entry, the GEMM
of a real model preset at a random tensor-parallel split) are compiled with the real Triton, drawn anew each run, and
compared with the prediction; every committed compiled row (results/triton-moe/check-configs) is compared too.
Skipped without Triton or the engine.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from _engine_exec import engine_source_or_skip
from tileprobe.backends.triton.compile import TritonBuild, compile_many
from tileprobe.backends.triton.toolchain import installed
from tileprobe.families import triton_moe as tm
from tileprobe.predict._common import CannotPredict
from tileprobe.predict.triton_moe import predict
from tileprobe.results.writer import read_rows
from tileprobe.workloads import PRESETS

ROWS = Path(__file__).resolve().parents[2] / "results" / "triton-moe" / "check-configs"
ARCHS = (89, 90, 100, 120)


def _random_entry(rng):
    return {"BLOCK_SIZE_M": rng.choice([16, 32, 64, 128]), "BLOCK_SIZE_N": rng.choice([32, 64, 128, 256]),
            "BLOCK_SIZE_K": rng.choice([32, 64, 128, 256]), "GROUP_SIZE_M": rng.choice([1, 8, 16, 32]),
            "num_warps": rng.choice([4, 8]), "num_stages": rng.choice([1, 2, 3, 4, 5])}


def _random_gemm(rng):
    """A real model's GEMM: (gemm, E, N, K, top_k) at a tensor-parallel split its intermediate size allows."""
    model = rng.choice(list(PRESETS.values()))
    tp = rng.choice([t for t in (1, 2, 4, 8) if model.inter % t == 0])
    gemm = rng.choice(tm.GEMMS)
    return (gemm, model.experts, *tm.gemm_shape(gemm, model.hidden, model.inter // tp), model.top_k)


def _draw(rng, label, sha):
    """A launch the predictor answers (it covers nearly all of the shipped trees' launches, so few redraws)."""
    for _ in range(200):
        case = (rng.choice(tm.QUANTS), _random_gemm(rng), _random_entry(rng), rng.choice(ARCHS),
                rng.choice([1, 8, 64, 512]))
        quant, (gemm, experts, n, k, top_k), entry, cc, m = case
        try:
            return case, predict(label, quant, entry, cc, installed().version, n, k, kernel_sha256=sha)
        except CannotPredict:
            continue
    raise AssertionError("no launch the predictor answers in 200 draws")


@pytest.mark.triton
@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_predictor_is_exact_against_the_compiler(engine, rng):
    src, ks = engine_source_or_skip(engine)
    cases = [_draw(rng, src.label(), ks.sha256) for _ in range(2)]
    jobs = [tm.launch_job(engine, ks, quant, gemm, experts, n, k, m, top_k, entry, cc)
            for (quant, (gemm, experts, n, k, top_k), entry, cc, m), _ in cases]
    for (case, predicted), b in zip(cases, compile_many(jobs, 1)):
        assert isinstance(b, TritonBuild), (case, b)
        assert predicted == b.shared, (case, predicted, b.shared)


def _committed():
    """Each committed compiled row's launch: (engine, quant, entry, cc, version, N, K, kernel sha256) -> bytes."""
    out = {}
    for folder in sorted(p for p in ROWS.iterdir() if p.is_dir()):
        kernel = json.loads((folder / "run.json").read_text())["kernel_sha256"]
        for r in read_rows(folder)[0]:
            if r.get("family") != "triton-moe" or r.get("smem_bytes") is None:
                continue
            bm, bn, bk = (int(x) for x in r["tile"].split("x"))
            entry = {"BLOCK_SIZE_M": bm, "BLOCK_SIZE_N": bn, "BLOCK_SIZE_K": bk, "GROUP_SIZE_M": int(r["group_size_m"]),
                     "num_warps": int(r["num_warps"]), "num_stages": int(r["stages"])}
            nk = re.search(r" N=(\d+) K=(\d+)", r["problem"])
            key = (r["engine"], r["quant"], tuple(entry.items()), int(r["arch"][3:].rstrip("a")), r["triton_version"],
                   int(nk.group(1)), int(nk.group(2)), kernel)
            out.setdefault(key, set()).add(r["smem_bytes"])
    return out


def test_every_committed_row_is_predicted_exactly():
    """The committed rows (Triton 3.8.0's compiled bytes) on sm_89 / sm_120 / sm_121, bf16, fp8 and fp8 block: the
    predictor answers at least 95% of the distinct launches, and every answer is the compiled number."""
    launches = _committed()
    answered, wrong = 0, []
    for (engine, quant, entry, cc, version, n, k, kernel), got in launches.items():
        try:
            p = predict(engine, quant, dict(entry), cc, version, n, k, kernel_sha256=kernel)
        except CannotPredict:
            continue
        answered += 1
        if {p} != got:
            wrong.append((engine, quant, dict(entry), cc, n, k, p, got))
    assert not wrong, wrong[:5]
    assert answered >= 0.95 * len(launches), (answered, len(launches))


def test_another_release_or_kernel_cannot_predict(rng):
    e = _random_entry(rng) | {"num_stages": rng.choice([2, 3, 4])}
    src, ks = engine_source_or_skip(rng.choice(["vllm", "sglang"]))
    args = (src.label(), rng.choice(tm.QUANTS), e, rng.choice(ARCHS))
    other_release = f"3.{rng.randrange(0, 8)}.{rng.randrange(0, 3)}"
    with pytest.raises(CannotPredict, match="Triton"):
        predict(*args, other_release, 1536, 4096, kernel_sha256=ks.sha256)
    changed = ks.sha256[:-1] + ("0" if ks.sha256[-1] != "0" else "1")
    with pytest.raises(CannotPredict, match="source"):
        predict(*args, "3.8.0", 1536, 4096, kernel_sha256=changed)
    other_engine = "sglang 0.5.23" if src.label().startswith("vllm") else "vllm 0.33.0"
    with pytest.raises(CannotPredict):  # the hash is the other engine's kernel
        predict(other_engine, *args[1:], "3.8.0", 1536, 4096, kernel_sha256=ks.sha256)
    with pytest.raises(TypeError, match="kernel_sha256"):
        predict(*args, "3.8.0", 1536, 4096)
    with pytest.raises(CannotPredict, match="sm_80"):
        predict(*args[:3], 80, "3.8.0", 1536, 4096, kernel_sha256=ks.sha256)
