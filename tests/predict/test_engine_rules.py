"""A stated Triton rule on another engine release's files (tileprobe.predict.recheck.engine_lookup): a release's
manifest row re-checking a changed kernel file makes that file's key answer as the key the rule was checked on; a row
that differed makes its key decline, even a key the table holds (a byte-identical kernel file whose imported helper
changed); without a row a changed file declines. And vLLM 0.34.0's committed rows hold: a random launch of a kernel
whose file 0.34.0 changed, captured from that wheel, is answered, and only through the row, with Triton's own bytes."""

from __future__ import annotations

import hashlib
import importlib.util
from pathlib import Path

import pytest

from _triton_rules import assert_tritons_bytes, capture, draw
from tileprobe.audit import conv_rule, mamba_rule, moe_rule
from tileprobe.engines import locate, manifest
from tileprobe.predict import CannotPredict, recheck, triton_attention, triton_conv, triton_moe, triton_ogs, triton_ssd

MODULES = {"triton-ssd": triton_ssd, "triton-conv": triton_conv, "triton-attention": triton_attention,
           "triton-ogs": triton_ogs}


ROOT = Path(__file__).resolve().parents[2]


def test_a_release_row_moves_a_rule_key_and_a_row_that_differed_stops_it(rng, monkeypatch):
    family = rng.choice(sorted(MODULES))
    mod = MODULES[family]
    triton = mod.TRITON_VERSIONS[0]
    old = rng.choice(sorted(k for k in mod.CHECKED if k[0] == triton))[1:]
    kernel = old[0] if family == "triton-ogs" else f"kernel_{rng.randrange(1000)}"
    new = (*old[:-1], hashlib.sha256(rng.randbytes(16)).hexdigest())
    monkeypatch.setattr(manifest, "rule_rows", lambda: ())  # the committed rows out of the way

    def look(key, version=triton):
        return recheck.lookup(family, mod.CHECKED, mod.TRITON_VERSIONS, version, kernel, key)

    assert look(new) is None  # a changed file, no row: the family raises source_checked
    row = {"family": family, "kernel": kernel, "key": list(new), "from": list(old), "triton": triton,
           "checked": rng.randint(1, 9), "differ": 0, "engine": "vllm 9.9.9"}
    with recheck.provisionally([row]):
        assert look(new) == mod.CHECKED[(triton, *old)]
        assert look(old) == mod.CHECKED[(triton, *old)]
    with recheck.provisionally([{**row, "kernel": kernel + "_other"}]):  # another kernel's row moves nothing
        assert look(new) is None
    differed = rng.randint(1, 4)
    with recheck.provisionally([{**row, "differ": differed}]), pytest.raises(CannotPredict, match=f"on {differed} of"):
        look(new)
    with recheck.provisionally([{**row, "key": list(old), "differ": differed}]):
        with pytest.raises(CannotPredict, match="vllm 9.9.9"):
            look(old)  # the table holds it, but a release's own launches differed: a helper changed under it
    assert look(old) == mod.CHECKED[(triton, *old)]


def _wheel(version: str):
    found = [p.wheel for p in locate.releases("vllm") if p.wheel is not None and p.version == version]
    if not found:
        pytest.skip(f"no cached vllm {version} wheel (tileprobe engines fetch vllm=={version})")
    return str(found[0])


@pytest.mark.triton
def test_vllm_0_34_0s_changed_conv_and_gdn_files_answer_through_their_rows_with_tritons_bytes(rng, tmp_path,
                                                                                               monkeypatch):
    rows = {(r["kernel"], tuple(r["key"])) for r in manifest.rule_rows()
            if r["engine"] == "vllm 0.34.0" and r["family"] == "triton-conv" and r["key"] != r["from"]}
    if not rows:
        pytest.fail("vllm-0.34.0.json has no re-checked triton-conv row for a changed file "
                    "(python tools/engine_rules_recheck.py vllm WHEEL)")
    wheel = _wheel("0.34.0")
    cap = capture("rtx-pro-6000", [("vllm", "qwen3-next-80b-a3b", ("vllm-gdn",), (1, 2))], {"vllm": wheel})
    moved = [(la, j) for la, j in cap if (la.kernel, (mamba_rule.source_sha256(la, j),)) in rows]
    kernels = sorted({la.kernel for la, _ in moved})
    assert len(kernels) >= 3, kernels  # conv1d fwd / update, the post-conv prep, the packed decode
    launch, job, predicted = draw(rng, moved, rng.choice(kernels), conv_rule.predict)
    assert_tritons_bytes(launch, job, predicted, tmp_path)
    # the predicted row says where its rule was re-checked (tileprobe.audit.run.outcome's reason)
    note = recheck.engine_note("vllm 0.34.0", launch.kernel, launch.kernel_file)
    assert "re-checked on vllm 0.34.0's" in note and "0 differ" in note, note
    assert recheck.engine_note("vllm 0.33.0", launch.kernel, launch.kernel_file) == ""
    monkeypatch.setattr(manifest, "rule_rows", lambda: ())
    with pytest.raises(CannotPredict, match="engine source"):
        conv_rule.predict(launch, job, "3.8.0")


def _tool(name: str):
    spec = importlib.util.spec_from_file_location(f"_tp_{name}", ROOT / "tools" / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.triton
def test_vllm_0_34_0s_fused_moe_kernel_declines_where_its_recheck_found_the_rule_wrong(rng, tmp_path, monkeypatch):
    """tools/engine_rules_recheck.py asked the triton-moe rule of vLLM 0.34.0's own fused_moe_kernel launches and
    found it wrong on some (its manifest row: differ > 0): every 0.34.0 launch then declines, naming the row. And the
    row is right: an fp8-block launch on SM120 with a 128-wide N tile and 4 warps (the b_scale vector the rule puts
    through shared memory), formed by 0.34.0's own launcher, takes other bytes than the rule states for the file it
    was checked on."""
    rows = [r for r in manifest.rule_rows() if r["engine"] == "vllm 0.34.0" and r["family"] == "triton-moe"]
    assert rows and all(r["differ"] > 0 for r in rows), rows
    trr = _tool("triton_rules_recheck")
    entry = {"BLOCK_SIZE_M": rng.choice([16, 32, 64]), "BLOCK_SIZE_N": 128, "BLOCK_SIZE_K": rng.choice([64, 128]),
             "GROUP_SIZE_M": rng.choice([1, 16]), "num_warps": 4, "num_stages": rng.choice([3, 4])}
    layer = ("fp8-block", 128 * rng.randint(8, 56), 128 * rng.randint(1, 6), rng.choice([64, 128, 256]),
             rng.randint(1, 64), 8)
    target = rng.choice(["rtx-pro-6000", "dgx-spark-gb10"])
    got = trr.moe_capture({"vllm": _wheel("0.34.0")}, (entry,), (layer,), (target,))
    assert [la.kernel for la, _ in got] == ["fused_moe_kernel"] * 2
    for la, job in got:
        with pytest.raises(CannotPredict, match="differed from Triton 3.8.0's bytes") as err:
            moe_rule.predict(la, job, "3.8.0")
        assert "vllm 0.34.0" in str(err.value)
    old = next(k for (t, k), engine in triton_moe.CHECKED.items() if engine == triton_moe.VLLM and t == "3.8.0")
    monkeypatch.setattr(manifest, "rule_rows", lambda: ())
    differ = 0
    for la, job in got:
        row = {"family": "triton-moe", "kernel": "fused_moe_kernel", "key": [job.source.sha256], "from": [old],
               "triton": "3.8.0", "checked": 1, "differ": 0}
        with recheck.provisionally([row]):
            stated = moe_rule.predict(la, job, "3.8.0")
        shared, _, err = trr.tritons_bytes(job, False, str(tmp_path))
        assert shared is not None, err
        differ += shared != stated
    assert differ, (entry, layer, target)
