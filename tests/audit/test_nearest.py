"""tileprobe.audit.nearest on real captured launches over the rtx-pro-6000 limit (vLLM's lightning _fwd_kv_parallel for
minimax-m1; SGLang's context and extend attention in fp32 at head 128, results/audit/models/gqa-h128-fp32.json): the
variant found fits (its bytes are Triton's own for the engine's kernel object, launched by the engine's launcher with
the variant's values), differs from the launch only where the rule allows, and every candidate before it in the
rule's order (enumerated here from the rule's statement, not with the module's generator) compiles over the limit or
not at all. The point (batch, sequence length) and, where said, the limit are random per run."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import pytest
from _engine_own import captured, tritons_own

from tileprobe.audit import jobs, kernels, loader, nearest
from tileprobe.backends.triton.compile import TritonBuild, TritonCompileError, compile_job
from tileprobe.models import attention_model
from tileprobe.targets import profile

pytestmark = pytest.mark.triton

ROOT = Path(__file__).resolve().parents[2]
TARGET = profile("rtx-pro-6000")
LIMIT = TARGET.smem_optin
FP32_H128 = ROOT / "results/audit/models/gqa-h128-fp32.json"


def _captured(src, entry_name, model, point, kernel):
    """(engine source, launch, job) of `kernel` as `entry_name`'s launcher makes it for `model` on the target."""
    entry = kernels.KERNELS[entry_name]
    launch = next(la for la in captured(src, TARGET, entry, model, point) if la.kernel == kernel)
    cut = jobs.kernel_source if entry.compile_from == "extract" else \
        (lambda s_, la: loader.module_source(entry, s_, TARGET, la.kernel))
    return src, launch, jobs.job_of(src, launch, TARGET.cc_int, cut)


def _tritons_own(src, entry_name, model, point, kernel, values, tmp_path, monkeypatch) -> int:
    """Triton's own metadata.shared (tests/audit/_engine_own.py) of the engine's kernel object, launched by the
    engine's own launcher on its real arguments with `values` (the variant's) put over them."""
    ((_, _, shared),) = tritons_own(src, TARGET, kernels.KERNELS[entry_name], model, point, tmp_path, monkeypatch,
                                    keep=lambda k, tuned: k == kernel, values=values)
    return shared


def _side(launch, names):
    return next((n for n in names if isinstance(launch.arg(n), int)), None)


def _earlier(launch, variant_key, stages):
    """Every candidate the rule puts before `variant_key` = (query-side halvings, kv-side halvings, stages removed),
    as {name: value}: the rule's statement enumerated (tiles halved down to 16, stages down to 1; BLOCK_Q halves
    with BLOCK_M, as vLLM derives it; NUM_CBLOCK = BLOCK // CBLOCK, as lightning's launcher derives it)."""
    q, kv = _side(launch, nearest.QUERY_SIDE), _side(launch, nearest.KV_SIDE)

    def levels(name):
        v = launch.arg(name) if name else None
        return [0] if v is None else [i for i in range(8) if v % (1 << i) == 0 and v >> i >= 16]

    out = []
    for qi in levels(q):
        for ki in levels(kv):
            for sr in range(stages):
                if (qi, ki, sr) == (0, 0, 0) or (qi, ki, sr) >= variant_key:
                    continue
                values = {}
                if qi:
                    values[q] = launch.arg(q) >> qi
                    if isinstance(launch.arg("BLOCK_Q"), int):
                        if launch.arg("BLOCK_Q") % (1 << qi):
                            continue
                        values["BLOCK_Q"] = launch.arg("BLOCK_Q") >> qi
                if ki:
                    values[kv] = launch.arg(kv) >> ki
                    if isinstance(launch.arg("NUM_CBLOCK"), int):
                        values["NUM_CBLOCK"] = launch.arg("BLOCK") // values[kv]
                if sr:
                    values["num_stages"] = stages - sr
                out.append(values)
    return out


def _key(launch, variant, stages):
    new = {k: b for k, _, b in variant.changed}
    q, kv = _side(launch, nearest.QUERY_SIDE), _side(launch, nearest.KV_SIDE)
    qi = int(math.log2(launch.arg(q) // new[q])) if q in new else 0
    ki = int(math.log2(launch.arg(kv) // new[kv])) if kv in new else 0
    return qi, ki, stages - new.get("num_stages", stages)


def _check(src, entry_name, model, point, kernel, tmp_path, monkeypatch, limit=LIMIT, compile_one=compile_job):
    src, launch, job = _captured(src, entry_name, model, point, kernel)
    own = compile_job(job)
    assert own.shared > limit, (kernel, own.shared)
    variant = nearest.nearest(launch, job, limit, compile_one)
    stages = own.num_stages
    if variant is None:
        return launch, job, None, _earlier(launch, (99, 99, 99), stages)
    assert variant.bytes <= limit and isinstance(variant.build, TritonBuild)
    new = {k: b for k, _, b in variant.changed}
    assert _tritons_own(src, entry_name, model, point, kernel, new, tmp_path, monkeypatch) == variant.bytes
    before, after = dict(job.kwargs), dict(variant.job.kwargs)
    differ = {k for k in before.keys() | after.keys() if before.get(k) != after.get(k)}
    allowed = {*nearest.QUERY_SIDE, *nearest.KV_SIDE, "BLOCK_Q", "NUM_CBLOCK", "num_stages"}
    assert differ == set(new) and differ <= allowed, (differ, variant.changed)
    assert all(after[k] == v for k, v in new.items()) and variant.job.source == job.source
    assert new.get("num_stages", stages) <= stages and all(after[k] >= 16 for k in differ & {*nearest.QUERY_SIDE,
                                                                                     *nearest.KV_SIDE})
    assert all(before[k] > after[k] and before[k] % after[k] == 0 for k in differ & {*nearest.QUERY_SIDE,
                                                                                   *nearest.KV_SIDE})
    if "NUM_CBLOCK" in new:
        assert after["NUM_CBLOCK"] * after["CBLOCK"] == before["NUM_CBLOCK"] * before["CBLOCK"]
    return launch, job, variant, _earlier(launch, _key(launch, variant, stages), stages)


def _none_fit(job, earlier, limit):
    for values in earlier:
        b = compile_job(nearest.with_values(job, values))
        assert not (isinstance(b, TritonBuild) and b.shared <= limit), (values, b.shared)


def test_lightning_kv_parallel_for_minimax_m1(vllm, rng, tmp_path, monkeypatch):
    model = attention_model("minimax-m1")
    pt = kernels.Point(1, rng.randint(300, 4096))
    _, job, variant, earlier = _check(vllm, "vllm-lightning-attention", model, pt, "_fwd_kv_parallel", tmp_path,
                                      monkeypatch)
    assert variant is not None and variant.tried == len(earlier) + 1
    _none_fit(job, earlier, LIMIT)


def test_lightning_kv_parallel_under_a_random_limit(vllm, rng, tmp_path, monkeypatch):
    """A random limit under what num_stages 1 alone gives: the variant found (or None) is the first of the rule's
    order that fits under it, so it halves CBLOCK (lightning's key/value-side tile), keeping NUM_CBLOCK * CBLOCK the
    launcher's block."""
    model = attention_model("minimax-m1")
    pt = kernels.Point(1, rng.randint(300, 4096))
    _, launch, job = _captured(vllm, "vllm-lightning-attention", model, pt, "_fwd_kv_parallel")
    stages_only = compile_job(nearest.with_values(job, {"num_stages": 1})).shared
    limit = rng.randint(stages_only // 2, stages_only - 1)
    _, job, variant, earlier = _check(vllm, "vllm-lightning-attention", model, pt, "_fwd_kv_parallel", tmp_path,
                                      monkeypatch, limit)
    smallest = compile_job(nearest.with_values(job, {"CBLOCK": 16, "NUM_CBLOCK": launch.arg("BLOCK") // 16,
                                                           "num_stages": 1}))
    assert (variant is None) is (smallest.shared > limit), (limit, smallest.shared)
    assert variant is None or {"CBLOCK", "NUM_CBLOCK"} <= {k for k, _, _ in variant.changed}, variant
    _none_fit(job, earlier, limit)


@pytest.mark.parametrize("entry,kernel", [("sglang-context-attention", "_fwd_kernel"),
                                          ("sglang-extend-attention", "_fwd_kernel")])
def test_sglang_fp32_head_128(sglang, rng, tmp_path, monkeypatch, entry, kernel):
    model = attention_model(str(FP32_H128))
    pt = kernels.Point(rng.randint(1, 8), rng.randint(64, 4096))
    _, job, variant, earlier = _check(sglang, entry, model, pt, kernel, tmp_path, monkeypatch)
    assert variant is not None and variant.tried == len(earlier) + 1
    _none_fit(job, earlier, LIMIT)


def test_a_candidate_the_kernel_rejects_is_not_a_variant(vllm, rng, tmp_path, monkeypatch):
    """A compile error (a static_assert, ...) is "not this one": with the first fitting candidates rejected, the
    next fitting one in the order is the variant."""
    model = attention_model("minimax-m1")
    _, launch, job = _captured(vllm, "vllm-lightning-attention", model, kernels.Point(1, rng.randint(300, 4096)),
                               "_fwd_kv_parallel")
    first = nearest.nearest(launch, job, LIMIT, compile_job)
    rejected = {first.job}
    for _ in range(rng.randint(1, 2)):
        rejected.add(nearest.nearest(launch, job, LIMIT,
                                     lambda j: TritonCompileError("static_assert") if j in rejected
                                     else compile_job(j)).job)
    got = nearest.nearest(launch, job, LIMIT, lambda j: TritonCompileError("x") if j in rejected else compile_job(j))
    assert got.job not in rejected and got.bytes <= LIMIT and got.tried > first.tried


def test_a_launch_that_fits_has_none(vllm, rng):
    model = attention_model("minimax-m1")
    kernel = rng.choice(["_fwd_kv_reduce", "_fwd_diag_kernel"])
    _, launch, job = _captured(vllm, "vllm-lightning-attention", model, kernels.Point(1, rng.randint(300, 4096)),
                               kernel)
    assert compile_job(job).shared <= LIMIT
    assert nearest.nearest(launch, job, LIMIT, compile_job) is None


def test_an_autotuned_launch_gets_the_first_config_of_its_autotuner_that_fits(vllm, rng):
    """The configs one autotune call was left with (here: the captured kv_parallel launch with num_stages and
    CBLOCK set per config, as the capture records an autotuner's configs), in a random order: the variant is the
    first in the list that fits, and the count says how many fit; a launch of another call is not among them."""
    model = attention_model("minimax-m1")
    _, launch, job = _captured(vllm, "vllm-lightning-attention", model, kernels.Point(1, rng.randint(300, 4096)),
                               "_fwd_kv_parallel")
    block = launch.arg("BLOCK")
    own = {"num_stages": compile_job(job).num_stages, "CBLOCK": launch.arg("CBLOCK"),
           "NUM_CBLOCK": launch.arg("NUM_CBLOCK")}
    settings = [{"num_stages": s, "CBLOCK": c, "NUM_CBLOCK": block // c} for s in (3, 2, 1) for c in (32, 16)]
    settings = rng.sample(settings, rng.randint(0, len(settings)))
    settings.insert(rng.randint(0, len(settings)), own)  # the launched config (over the limit) among them
    n = len(settings)
    configs = []
    for i, values in enumerate(settings):
        options = (*((k, v) for k, v in launch.options if k != "num_stages"), ("num_stages", values["num_stages"]))
        args = tuple((k, values.get(k, v)) for k, v in launch.args)
        la = dataclasses.replace(launch, args=args, options=options, autotune=(i, n, n + 2))
        configs.append((la, nearest.with_values(job, values)))
    other = (dataclasses.replace(configs[-1][0], call_site="elsewhere.py:1", autotune=(0, n, n + 2)),
             nearest.with_values(job, {"num_stages": 1, "CBLOCK": 16, "NUM_CBLOCK": block // 16}))
    builds = [compile_job(j) for _, j in configs]
    fit = [i for i, b in enumerate(builds) if b.shared <= LIMIT]
    over = [i for i, b in enumerate(builds) if b.shared > LIMIT]
    la, jb = configs[over[0]]
    variant = nearest.nearest(la, jb, LIMIT, compile_job, [other, *configs])
    if not fit:
        assert variant is None
        return
    assert variant.job == configs[fit[0]][1] and variant.config == (fit[0], n) and variant.configs_fit == len(fit)
    assert variant.describe().startswith(f"the autotuner is left with {len(fit)} configs")
