"""The rule lookup honours a recheck file (tileprobe.predict.recheck): under a release the rule tables do not name, a
rule the release's file lists as re-checked with 0 differ answers as it does on the release it was moved from; one
the file does not list, or lists as differing, declines; without a file the release is refused as before. The
committed recheck files name only keys the tables have."""

from __future__ import annotations

import json

import pytest

from tileprobe.predict import CannotPredict, recheck
from tileprobe.predict import triton_attention, triton_conv, triton_moe, triton_ogs, triton_ssd

NEW = "9.9.9"  # a release no table names
BASE = "3.8.0"
ENTRY = {"BLOCK_SIZE_M": 64, "BLOCK_SIZE_N": 64, "BLOCK_SIZE_K": 64, "GROUP_SIZE_M": 1, "num_warps": 4,
         "num_stages": 3}


def _key(table: dict, label_prefix: str) -> tuple:
    return next(k[1:] for k, v in table.items() if k[0] == BASE and v.startswith(label_prefix))


def _row(family, kernel, key, differ=0, checked=3):
    return {"family": family, "kernel": kernel, "key": list(key), "from": BASE, "checked": checked,
            "compiled": 1, "differ": differ}


@pytest.fixture
def recheck_file(tmp_path, monkeypatch):
    monkeypatch.setattr(recheck, "FOLDER", tmp_path)

    def write(rows):
        (tmp_path / f"{NEW}.json").write_text(json.dumps({"triton": NEW, "from": BASE, "rules": rows}))
        recheck._read.cache_clear()  # a rewrite within the file system's mtime resolution
    return write


def test_a_listed_zero_differ_moe_rule_answers_and_others_decline(recheck_file):
    vllm, sglang = _key(triton_moe.CHECKED, "vllm"), _key(triton_moe.CHECKED, "sglang")
    args = ("bf16", ENTRY, 120)
    want = triton_moe.predict(triton_moe.VLLM, *args, BASE, 1536, 4096, kernel_sha256=vllm[0])
    with pytest.raises(CannotPredict, match="Triton"):  # no file: refused as before
        triton_moe.predict(triton_moe.VLLM, *args, NEW, 1536, 4096, kernel_sha256=vllm[0])
    recheck_file([_row("triton-moe", "fused_moe_kernel", vllm), _row("triton-moe", "fused_moe_kernel", sglang, 1)])
    assert triton_moe.predict(triton_moe.VLLM, *args, NEW, 1536, 4096, kernel_sha256=vllm[0]) == want
    with pytest.raises(CannotPredict, match=f"not re-checked on triton {NEW}"):  # listed, but 1 differed
        triton_moe.predict(triton_moe.SGLANG, *args, NEW, 1536, 4096, kernel_sha256=sglang[0])
    other = _key({k: v for k, v in triton_moe.CHECKED.items() if k[1:] != vllm}, "vllm")
    with pytest.raises(CannotPredict, match=f"not re-checked on triton {NEW}"):  # not listed
        triton_moe.predict(triton_moe.VLLM, *args, NEW, 1536, 4096, kernel_sha256=other[0])


@pytest.mark.parametrize("family, module, kernel", [
    ("triton-ssd", triton_ssd, "_bmm_chunk_fwd_kernel"),
    ("triton-conv", triton_conv, next(iter(triton_conv.RULES))),
    ("triton-attention", triton_attention, "kernel_unified_attention"),
    ("triton-ogs", triton_ogs, "_topk_forward")])
def test_scope_of_a_listed_rule_passes_and_an_unlisted_one_declines(family, module, kernel, recheck_file):
    keys = [k[1:] for k in module.CHECKED if k[0] == BASE and (family != "triton-ogs" or k[1] == kernel)]
    if family == "triton-attention":  # a key of the file the kernel's rule was checked in
        keys = [k for k in keys if module.CHECKED[(BASE, *k)] in module.KERNEL_FILES[kernel]]
    key = keys[0]
    sha = key[-1]
    module._check_scope(kernel, BASE, sha, 120)  # answers on the table's release
    recheck_file([])
    with pytest.raises(CannotPredict, match=f"not re-checked on triton {NEW}"):
        module._check_scope(kernel, NEW, sha, 120)
    recheck_file([_row(family, kernel, key)])
    module._check_scope(kernel, NEW, sha, 120)
    recheck_file([_row(family, kernel, key, differ=1)])
    with pytest.raises(CannotPredict, match=f"not re-checked on triton {NEW}"):
        module._check_scope(kernel, NEW, sha, 120)
    recheck_file([_row(family, kernel, key, checked=0)])
    with pytest.raises(CannotPredict, match=f"not re-checked on triton {NEW}"):
        module._check_scope(kernel, NEW, sha, 120)


def test_committed_recheck_files_name_table_keys():
    tables = {"triton-moe": triton_moe.CHECKED, "triton-ssd": triton_ssd.CHECKED, "triton-conv": triton_conv.CHECKED,
              "triton-attention": triton_attention.CHECKED, "triton-ogs": triton_ogs.CHECKED}
    for path in sorted(recheck.FOLDER.glob("*.json")):
        doc = json.loads(path.read_text())
        assert path.stem == doc["triton"], path
        for r in doc["rules"]:
            assert (r["from"], *r["key"]) in tables[r["family"]], (path.name, r)
            assert r["differ"] == len(r.get("differences", [])) <= r["checked"], (path.name, r)
