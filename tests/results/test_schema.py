"""JSON Schemas: every committed results file matches its schema; broken documents do not."""

import copy
import json
import random
from pathlib import Path

import pytest

pytest.importorskip("jsonschema", reason="tileprobe depends on jsonschema>=4.18; install it to validate")

from _synth import add_runtime, make_static, meta_for, write_set  # noqa: E402
from jsonschema import Draft202012Validator  # noqa: E402

from tileprobe.results import schema  # noqa: E402
from tileprobe.errors import UsageError  # noqa: E402
from tileprobe.reports.recommend import recommend_document  # noqa: E402
from tileprobe.results.writer import COLUMNS  # noqa: E402
from tileprobe.results.resultset import load  # noqa: E402
from tileprobe.verdict import Evidence, Verdict, evidence_for  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "results"
JSONL = sorted(RESULTS.rglob("results.jsonl"))
RUN_JSON = sorted(RESULTS.rglob("run.json"))
KNOWN_GOOD = sorted((RESULTS / "known_good").glob("*.json"))


def _rel(p: Path) -> str:
    return str(p.relative_to(ROOT))


def test_names_and_files():
    assert schema.names() == ["known-good", "recommend", "row", "run"]
    for name in schema.names():
        s = schema.schema(name)
        Draft202012Validator.check_schema(s)
        assert s["$schema"] == "https://json-schema.org/draft/2020-12/schema"
        assert s["$id"] == f"urn:tileprobe:schema:{name}:{max(schema.versions(name))}"
        assert "$ref" not in json.dumps(s).replace('"$ref": "#/', "")  # self-contained: only local references
    with pytest.raises(UsageError, match="unknown schema 'nope'"):
        schema.schema("nope")
    with pytest.raises(UsageError, match="no version 99"):
        schema.schema("row", 99)


def test_schema_returns_a_copy():
    schema.schema("row")["properties"].clear()
    assert "verdict" in schema.schema("row")["properties"]


def test_row_schema_knows_every_column_and_the_verdict_vocabulary():
    props = schema.schema("row")["properties"]
    assert [c for c in COLUMNS if c not in props] == []
    assert set(props["verdict"]["enum"]) == {v.value for v in Verdict}
    assert {evidence_for(v).value for v in Verdict} <= set(props["evidence"]["enum"])
    assert set(schema.schema("known-good")["properties"]["not_good"]["items"]["properties"]["verdict"]["enum"]) == \
        {v.value for v in Verdict}


def test_there_is_committed_evidence_to_validate():
    assert JSONL and RUN_JSON and KNOWN_GOOD


@pytest.mark.parametrize("path", JSONL, ids=_rel)
def test_committed_rows(path):
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    assert rows
    bad = {i: schema.errors("row", r) for i, r in enumerate(rows)}
    assert {i: e for i, e in bad.items() if e} == {}


@pytest.mark.parametrize("path", RUN_JSON, ids=_rel)
def test_committed_run_json(path):
    schema.validate("run", json.loads(path.read_text()))


@pytest.mark.parametrize("path", KNOWN_GOOD, ids=_rel)
def test_committed_known_good(path):
    schema.validate("known-good", json.loads(path.read_text()))


def test_recommend_output_of_the_committed_h200_sweep():
    doc = recommend_document(load(RESULTS / "h200" / "default_sweep"))
    schema.validate("recommend", json.loads(json.dumps(doc)))


def test_known_good_embeds_the_recommend_definitions_unchanged():
    kg, rec = schema.schema("known-good")["$defs"], schema.schema("recommend")["$defs"]
    for k in ("tile", "bucket", "workloads", "target", "toolchain"):
        assert kg[k] == rec[k], k


def test_synthetic_rows_and_merge_run_json(tmp_path):
    rng = random.Random(7)
    static = make_static(rng)
    rows = static + add_runtime(rng, static)
    folder = write_set(tmp_path / "s", rows, meta_for())
    for line in (folder / "results.jsonl").read_text().splitlines():  # as ResultsWriter writes them
        schema.validate("row", json.loads(line))
    schema.validate("run", json.loads((folder / "run.json").read_text()))
    schema.validate("recommend", json.loads(json.dumps(recommend_document(load(folder)))))
    merged = meta_for() | {"family": ["sm120-nvfp4", "sm90-fp8"], "target": None, "targets": [], "shard": None,
                           "toolchain": {"mixed": [{"cutlass_version": "4.5.0"}, {"cutlass_version": "4.2.0"}]},
                           "merged_from": [{"folder": "a", "command": "tileprobe sweep", "date": None}]}
    schema.validate("run", merged)
    schema.validate("run", meta_for(shard=[1, 4]))


def test_non_finite_numbers_and_extra_columns_are_allowed():
    row = json.loads((JSONL[0]).read_text().splitlines()[0])
    schema.validate("row", row | {"rel_err": "inf", "us_median": None, "a_column_from_the_future": [1, 2]})


def _first_row():
    return json.loads((RESULTS / "h200" / "default_sweep" / "results.jsonl").read_text().splitlines()[-1])


def test_a_broken_row_fails():
    row = _first_row()
    schema.validate("row", row)
    broken = row | {"verdict": "great", "swap_ab": "yes", "tile": "128x128", "us_median": "fast"}
    del broken["config"]
    with pytest.raises(schema.SchemaError) as exc:
        schema.validate("row", broken)
    errs = "\n".join(exc.value.errors)
    for what in ("'config' is a required property", "$.verdict", "$.swap_ab", "$.tile", "$.us_median"):
        assert what in errs, errs
    assert isinstance(exc.value, ValueError) and "not a valid row" in str(exc.value)


def test_broken_documents_fail():
    run = json.loads(RUN_JSON[0].read_text())
    assert schema.errors("run", {k: v for k, v in run.items() if k != "command"})
    assert schema.errors("run", run | {"shard": [0]})
    kg = json.loads(KNOWN_GOOD[0].read_text())
    assert schema.errors("known-good", kg | {"format": "tileprobe-known-good/2"})
    bad_tile = copy.deepcopy(kg)
    bad_tile["tiles"][0]["verdict"] = "smem-over-limit"
    assert any("$.tiles[0].verdict" in e for e in schema.errors("known-good", bad_tile))
    doc = json.loads(json.dumps(recommend_document(load(RESULTS / "h200" / "default_sweep"))))
    bucket = next(iter(next(iter(next(iter(doc["workloads"].values())).values())).values()))
    del bucket["best"]["us_median"]
    errs = schema.errors("recommend", doc)
    assert any(e.startswith("$.workloads.") and "'us_median' is a required property" in e for e in errs), errs


_BAD_VALUES = ["lots", -3, 0, 1.5, True, None, [], {}, "128x128", "banana", "auto", "12.0", "sm_90a", "inf", 7]


def test_the_fast_row_check_agrees_with_jsonschema(rng):
    """Readers check rows with schema.row_problems (compiled from the row schema, not jsonschema's cost per row):
    on committed rows and on the same rows with random columns set to random values or removed, it finds a problem
    exactly when jsonschema does, in the same columns."""
    rows = [json.loads(line) for path in JSONL for line in path.read_text().splitlines()]
    props = list(schema.schema("row")["properties"])
    for row in rng.sample(rows, 60):
        assert schema.row_problems(row) == [] and schema.errors("row", row) == []
        broken = dict(row)
        for col in rng.sample(props, rng.randint(1, 4)):
            if rng.random() < 0.15:
                broken.pop(col, None)
            else:
                broken[col] = rng.choice(_BAD_VALUES)
        fast = {p.split(":")[0] for p in schema.row_problems(broken)}
        slow = set()
        for e in schema.errors("row", broken):
            where = e.split(":")[0]
            slow.add(where.removeprefix("$.") if where != "$" else e.split("'")[1])
        assert fast == slow, (fast, schema.errors("row", broken))
