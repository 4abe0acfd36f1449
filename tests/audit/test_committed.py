"""docs/audit.md's two generated tables are what they claim: the covered kernels are the registry's
(tileprobe.audit.kernels.table) and the committed audits' summary is what their committed rows say
(tools/audit_committed.py table, read from results/audit/*/results.jsonl and run.json). Each committed audit's rows
name the engine release and Triton version, and a not-selected row names an engine line."""

from __future__ import annotations

import importlib.util
import json
import re
from pathlib import Path

from tileprobe.audit.kernels import table

ROOT = Path(__file__).resolve().parents[2]
DOC = (ROOT / "docs" / "audit.md").read_text()


def _between(name: str) -> str:
    m = re.search(rf"<!-- {name} -->\n(.*?)<!-- /{name} -->", DOC, re.S)
    assert m, f"docs/audit.md has no {name} markers"
    return m.group(1)


def _tool():
    spec = importlib.util.spec_from_file_location("audit_committed", ROOT / "tools" / "audit_committed.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_the_covered_kernels_table_is_the_registrys():
    assert _between("registry table") == table()


def test_the_committed_audits_table_is_what_the_rows_say():
    tool = _tool()
    assert _between("committed audits") == tool.table()
    for target, engine, model, *flags in tool.SET:
        out = tool.folder(target, engine, model, *flags)
        meta = json.loads((out / "run.json").read_text())
        rows = [json.loads(ln) for ln in (out / "results.jsonl").read_text().splitlines() if ln.strip()]
        assert rows and meta["toolchain"]["engine"].startswith(engine) and meta["target"]["name"] == target
        for r in rows:
            assert r["triton_version"] and r["engine"] == meta["toolchain"]["engine"], r
            if r["verdict"] == "not-selected":
                assert re.search(r"\.py:\d+", r["config_source"] or ""), r
            elif r["family"] == "compiled-audit":  # the path's compiled kernels: three answers, each with its word
                assert r["arch_evidence"] and r["gate_evidence"] and r["bytes_evidence"] and r["layer"], r
                assert (r["verdict"] == "unanswered") == ("none" in (r["arch_evidence"], r["gate_evidence"],
                                                                    r["bytes_evidence"]) and r["verdict"] not in
                                                          ("no-code", "refused", "smem-over-limit")), r
            else:
                assert r["evidence"] == "compiled" and r["smem_limit_bytes"] == meta["target"]["smem_optin"], r
                # every compiled row carries what the stated rules said of it (tileprobe.audit.answers)
                assert r["prediction"] == "exact" if r["predicted_smem_bytes"] is not None else \
                    r["prediction"].startswith("cannot predict: "), r
