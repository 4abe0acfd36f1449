"""The engine probes in tools/ that are not tileprobe families (no CUTLASS header): their parsing and verdicts.

tools/sglang_mtp_smem.py reads ptxas's per-entry report; tools/b12x_smem.py turns the CuTe DSL's allocator sizes into
rows. Both are checked here on synthetic inputs (random sizes each run); their committed outputs are checked too.
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from tileprobe.targets import profile

ROOT = Path(__file__).resolve().parent.parent


def _tool(name: str):
    spec = importlib.util.spec_from_file_location(f"_tp_{name}", ROOT / "tools" / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_ptxas_report_parsed_per_entry(rng):
    mtp = _tool("sglang_mtp_smem")
    want = [(f"_ZN6sglang3fc{i}E", rng.randrange(0, 99) * 256 if i % 3 else 0, rng.randrange(16, 255))
            for i in range(5)]
    log = ""
    for name, smem, regs in want:
        log += f"ptxas info    : Compiling entry function '{name}' for 'sm_120a'\n"
        log += "ptxas info    : Function properties for " + name + "\n    0 bytes stack frame, 0 bytes spill stores\n"
        tail = f", {smem} bytes smem" if smem else ""
        log += f"ptxas info    : Used {regs} registers, used 1 barriers{tail}\n"
    got = [(e, int(mtp._SMEM.search(rest).group(1)) if mtp._SMEM.search(rest) else 0, int(r))
           for e, a, r, rest in mtp._PTXAS.findall(log)]
    assert got == want


@pytest.mark.parametrize("over", [False, True])
def test_b12x_row_verdict_from_the_allocator_size(rng, over):
    b12x = _tool("b12x_smem")
    target = profile("rtx-pro-6000")
    smem = target.smem_optin + rng.randrange(1, 4096) if over else rng.randrange(1024, target.smem_optin + 1)
    got = {"storage": [["cute.struct::StorageGated", smem]], "kernel_class": "MoEStaticKernel", "ab_stage": 2,
           "epi_stage": 1, "tile_shape_mnk": [32, 128, 128], "smem_capacity": target.smem_optin,
           "flashinfer": "0.7.4", "seconds": 1.0}
    r = b12x.row("static", 32, "qwen3-30b-a3b", target, got)
    assert r["smem_bytes"] == smem and r["headroom_bytes"] == target.smem_optin - smem
    assert r["verdict"] == ("smem-over-limit" if over else "fits")
    # the bytes are the allocator's storage struct, not read from the compiled kernel: the word says so
    assert r["evidence"] == "dsl-allocator" and "not from the compiled kernel" in r["reason"]
    err = b12x.row("dynamic", 16, "qwen3-30b-a3b", target, {"error": "boom"})
    assert err["verdict"] == "compile-error" and err["smem_bytes"] is None


def test_committed_engine_tool_rows_are_what_the_tools_make_now():
    """Every committed row, re-derived with today's code rather than read back: a b12x row is rebuilt by
    tools/b12x_smem.row from its own recorded allocator sizes, today's target profile and workload preset, and must
    equal the committed row field for field; an sglang row's limit and arch must be today's profile's, and its
    verdict and headroom the ones its ptxas bytes give against that limit. (It used to check only that each row
    agreed with itself: a profile's limit could change and every committed row stay 'consistent'.)"""
    b12x = _tool("b12x_smem")
    paths = sorted(ROOT.glob("results/static/*__sglang-moe/engine_rows.jsonl")) + sorted(
        ROOT.glob("results/static/*__flashinfer-b12x/engine_rows.jsonl"))
    assert paths
    for path in paths:
        for line in path.read_text().splitlines():
            r = json.loads(line)
            target = profile(r["target"])
            if r["family"] == "flashinfer-b12x":
                got = ({"error": r["reason"]} if r["smem_bytes"] is None else
                       {"storage": r["storage"], "kernel_class": r["kernel_class"], "ab_stage": r["stages"],
                        "epi_stage": r["epi_stages"], "tile_shape_mnk": r["tile_shape_mnk"],
                        "smem_capacity": r["stage_cap_capacity"]})
                got |= {"flashinfer": r["engine"].split()[1], "seconds": r["compile_seconds"]}
                assert b12x.row(r["kernel"], r["tile_m"], r["workload"], target, got) == r, (path, r)
                continue
            assert (r["smem_limit_bytes"], r["arch"]) == (target.smem_optin, target.arch), (path, r)
            if r["smem_bytes"] is None:
                assert r["verdict"] == "compile-error"
                continue
            assert r["headroom_bytes"] == target.smem_optin - r["smem_bytes"]
            assert r["verdict"] == ("fits" if r["smem_bytes"] <= target.smem_optin else "smem-over-limit"), r
