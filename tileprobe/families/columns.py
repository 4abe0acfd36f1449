"""How a family's rows are shown, as data: the columns of its tables (terminal, report.md, CSV) and the words its
report uses (evidence sentences, which header rows apply, what the shared bytes are called).

A Family carries one ReportSpec (Family.report). The renderers (tileprobe.reports.terminal, .markdown, the CSV in
tileprobe.results.writer) read it and name no family. A column reads its cell from a row with `read(row, cells)`:
`cells` is the renderer's (Cells below), so one column renders as '-' for none in the terminal and '–' in markdown.
CUTLASS_REPORT reproduces the CUTLASS tables and words byte for byte; TRITON_REPORT is Triton's (kernel, op, shape,
where the config came from, BLOCK_*, num_warps, num_stages, metadata.shared).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Callable, Protocol


class Cells(Protocol):
    """What a renderer hands a column reader."""

    def fmt(self, value, nd: int | None = None) -> str: ...  # a value as this renderer writes it ('-' / '–' for none)

    def stages(self, row: dict) -> str: ...  # 'auto→4' or '4' (resultset.stages_text)

    def label(self, row: dict) -> str: ...  # the spec's short config label


Reader = Callable[[dict, Cells], str]


@dataclass(frozen=True)
class Column:
    key: str  # what the column is (also its CSV name where it is a row field)
    header: str  # the header text
    read: Reader  # its cell from a row
    width: int | None = None  # terminal: the most characters it takes before folding (None: its text's width)
    show: str = "always"  # "always"; "varies": only when the rows hold more than one value; "present": when any has one
    wrap: bool = False  # terminal: may wrap (reasons)
    min_width: int | None = None  # terminal: a wrapping column keeps at least this many characters


def field_of(key: str, nd: int | None = None) -> Reader:
    """The row field `key`, formatted by the renderer (`nd` decimals for numbers)."""
    if nd is None:
        return lambda r, c: c.fmt(r.get(key))
    return lambda r, c: c.fmt(r.get(key), nd)


def raw(key: str) -> Reader:
    """The row field as it is (a string the row always holds)."""
    return lambda r, c: r[key]


def visible(columns: tuple[Column, ...], rows: list[dict], cells: Cells) -> list[Column]:
    """The columns to show for these rows (Column.show)."""
    out = []
    for col in columns:
        if col.show == "varies" and len({col.read(r, cells) for r in rows}) < 2:
            continue
        if col.show == "present" and not any(r.get(col.key) not in (None, "") for r in rows):
            continue
        out.append(col)
    return out


EVIDENCE_ORDER = ("none", "predicted", "sized", "compiled", "launched", "verified", "static", "launch-attempted",
                  "verified-correct")


def evidence_text(rows: list[dict], meaning: dict[str, str], with_meaning: bool = True) -> str:
    """The evidence words of `rows` as the rows say them, weakest first, each with its sentence from `meaning`
    ('{triton}', '{arch}', '{device}' filled from the rows); "none" when there are no rows."""
    order = list(meaning) + [w for w in EVIDENCE_ORDER if w not in meaning]
    words = sorted({str(r.get("evidence")) for r in rows if r.get("evidence")},
                   key=lambda w: (order.index(w) if w in order else len(order), w))
    if not words:
        return "none"
    if not with_meaning:
        return ", ".join(words)
    values = {"triton": _values(rows, "triton_version", "?"), "arch": _values(rows, "arch", "?"),
              "device": _values(rows, "device_name", "?")}
    return "; ".join(f"`{w}` ({_fill(meaning[w], w, rows, values)})" if w in meaning else f"`{w}`" for w in words)


def _fill(text: str, word: str, rows: list[dict], values: dict) -> str:
    if "{" not in text:
        return text
    mine = [r for r in rows if r.get("evidence") == word]
    return text.format(triton=_values(mine, "triton_version", values["triton"]), arch=_values(mine, "arch", "?"),
                       device=_values(mine, "device_name", "?"))


def _values(rows: list[dict], key: str, default: str) -> str:
    vals = sorted({str(r[key]) for r in rows if r.get(key) not in (None, "")})
    return ", ".join(vals) or default


@dataclass(frozen=True)
class ReportSpec:
    terminal: tuple[Column, ...]  # the terminal's static table
    terminal_runtime: tuple[Column, ...]  # the terminal's runtime table
    table: tuple[Column, ...]  # report.md's verdict table (a `runtime` column is added when points were launched)
    runtime_table: tuple[Column, ...]  # report.md's "all rows" table per GEMM under Throughput
    evidence: dict[str, str]  # evidence word -> what was done ({triton}, {arch}, {device} filled from the rows)
    label: Callable[[dict, Cells], str]  # a short config label (summaries, best tiles, charts)
    header: tuple[str, ...] = ("cutlass",)  # header rows that apply: "cutlass" (nvcc, CUTLASS) or "triton"
    terminal_wide: tuple[Column, ...] = ()  # added with --wide
    terminal_runtime_wide: tuple[Column, ...] = ()
    terminal_tactic: tuple[Column, ...] = ()  # CUTLASS: the static table when rows name an engine's tactics
    order: Callable[[dict], tuple] | None = None  # the static rows' order in tables (None: as written)
    terminal_split: str | None = None  # the terminal: one table per value of this row field, where it varies
    terminal_caption: Callable[[list[dict]], str | None] | None = None  # the terminal: a line under each table
    terminal_title: str = "static probe"  # the terminal's static table's title
    verdict_after: str = ""  # report.md: what follows the verdict section's evidence sentence
    not_launched: str = "; not launched"  # after the evidence words where nothing was launched
    smem: str = "SharedStorage"  # what the shared bytes are called
    chart_caption: str = ""  # report.md, above the shared-bytes chart ({target}, {limit}, {words})
    chart_title: str = ""  # the chart's title ({target}, {tool}, {words})
    chart_tool: Callable[[dict], str] | None = None  # the compiler a row's bytes came from, for the chart title
    throughput_intro: str = ""
    runtime_evidence: bool = False  # report.md: say under Throughput what was launched and checked (evidence words)
    tie_rule: str = ""
    best_caption: str = "Best tile per batch size and epilogue (evidence: verified correct):"
    best_batch: str = "batch"  # the best-per-point table's batch column
    best_epilogue: bool = True  # ... and whether it has an epilogue column
    unit: str = "tile"  # what one config is called in sentences
    chart_xlabel: str | None = None  # the shared-bytes chart's x label and bar names (None: the chart's own)
    csv_first: tuple[str, ...] = ()  # CSV: these columns first (row fields), then every other row column ...
    csv_drop: tuple[str, ...] = ()  # ... except these
    fill: Callable[[dict], dict] | None = None  # an older row with the fields this spec shows, where derivable exactly

    def csv_columns(self, all_columns: list[str]) -> list[str]:
        first = [c for c in self.csv_first if c in all_columns]
        return first + [c for c in all_columns if c not in first and c not in self.csv_drop]

    def complete(self, row: dict) -> dict:
        return self.fill(row) if self.fill else row


# --- CUTLASS ------------------------------------------------------------------------------------------------------

CUTLASS_EVIDENCE = {
    "none": "not built (unsupported) or the build failed",
    "predicted": "sizes from tileprobe's model of the CUTLASS builders; nothing compiled",
    "sized": "kernel types instantiated on the host, sizeof(SharedStorage) read; no device code built",
    "compiled": "device code built by ptxas, sizeof(SharedStorage) read",
    "launched": "launched on a GPU; what it showed is in the verdict",
    "verified": "launched, every output element checked against the reference",
    # older files' words (still read): what they meant then
    "static": "older files' word for `sized`: kernel types instantiated, sizeof(SharedStorage) read",
    "launch-attempted": "older files' word for `launched`",
    "verified-correct": "older files' word for `verified`",
}
CUTLASS_TIE_RULE = ("two tiles tie when their medians differ by no more than the larger of their spreads (max - min "
                    "over the repeats); among tiles tied with the fastest, the one with the smaller SharedStorage wins "
                    "(more headroom), then the lower config name")
# Row columns only Triton families fill: the CUTLASS CSV leaves them out (it stays what it was before they existed).
TRITON_FIELDS = ("kernel", "kernel_file", "block_m", "block_n", "block_k", "batch_range", "config_origin",
                 "config_file", "config_key", "config_rule", "autotune_dropped")
# the compiled kernels on a model's path (tileprobe audit): only the audit's CSV carries them
PATH_FIELDS = ("layer", "phase", "library", "arch_answer", "arch_evidence", "gate_answer", "gate_evidence",
               "bytes_evidence")


def _swap(r: dict, c: Cells) -> str:
    return "on" if r.get("swap_ab") else "off"


def _cutlass_label(r: dict, c: Cells) -> str:
    return c.label(r)



def _runtime_tail(tflops: bool) -> tuple:
    """The timing, verdict and reason columns every runtime table ends with (TFLOP/s where the family counts flops)."""
    return (
        Column("us_median", "µs", field_of("us_median", 2)),
        Column("us_graph_median", "µs (graph)", field_of("us_graph_median", 2)),
        Column("us_spread", "± µs", field_of("us_spread", 2)),
        *((Column("tflops", "TFLOP/s", field_of("tflops", 2)),) if tflops else ()),
        Column("gbps", "GB/s", field_of("gbps", 0)),
        Column("pct_peak_bw", "% peak", field_of("pct_peak_bw", 1)),
        Column("pct_copy_bw", "% copy", field_of("pct_copy_bw", 1)),
        Column("verdict", "verdict", field_of("verdict")),
        Column("evidence", "evidence", field_of("evidence")),
        Column("best", "best", lambda r, c: r.get("_best") or ""),
        Column("reason", "reason", lambda r, c: "" if r.get("verdict") == "ok" else
               c.fmt(r.get("launch_reason") or r.get("reason"))),
    )


CUTLASS_REPORT = ReportSpec(
    terminal=(
        Column("tile", "tile", raw("tile")),
        Column("tile_bytes_k", "K bytes", raw("tile_bytes_k")),
        Column("schedule", "schedule", raw("schedule")),
        Column("epilogue", "epilogue", lambda r, c: r["epilogue"] + (" swap" if r["swap_ab"] else "")),
        Column("stages", "stages", lambda r, c: c.stages(r)),
        Column("smem_bytes", "SharedStorage B", field_of("smem_bytes")),
        Column("headroom_bytes", "headroom B", field_of("headroom_bytes")),
        Column("verdict", "verdict", raw("verdict")),
    ),
    terminal_tactic=(
        # An engine's tactics: the tactic names the tile (K in bytes) and fixes the schedule; the dtype pair and the
        # cluster tell variants of one tactic apart. Chosen so that nothing is cut at 120 columns.
        Column("tactic", "tactic", lambda r, c: r.get("tactic") or ""),
        Column("dtypes", "dtypes", lambda r, c: r.get("dtypes") or ""),
        Column("epilogue", "epilogue", lambda r, c: r["epilogue"] + (" swap" if r["swap_ab"] else "")),
        Column("cluster", "cluster", lambda r, c: r.get("cluster") or ""),
        Column("stages", "stages", lambda r, c: c.stages(r)),
        Column("smem_bytes", "smem B", field_of("smem_bytes")),
        Column("headroom_bytes", "headroom B", field_of("headroom_bytes")),
        Column("verdict", "verdict", raw("verdict")),
    ),
    terminal_wide=(Column("evidence", "evidence", lambda r, c: r.get("evidence") or ""),
                   Column("reason", "reason", lambda r, c: r.get("reason") or "", wrap=True)),
    terminal_runtime=(
        Column("workload", "workload", raw("workload")),
        Column("gemm", "gemm", raw("gemm")),
        Column("batch", "batch", field_of("batch")),
        Column("tile", "tile", raw("tile")),
        Column("schedule", "schedule", raw("schedule")),
        Column("verdict", "verdict", raw("verdict")),
        Column("us_median", "µs", field_of("us_median")),
        Column("us_graph_median", "µs graph", field_of("us_graph_median")),
        Column("gbps", "GB/s", field_of("gbps", 0)),
        Column("pct_read_bw", "% read BW", field_of("pct_read_bw")),
    ),
    terminal_runtime_wide=(
        Column("rel_err", "rel_err", lambda r, c: c.fmt(r["rel_err"], 4) if r.get("rel_err") is not None else "-"),
        Column("reason", "reason", lambda r, c: (r.get("reason") or "") if r["verdict"] != "ok" else "", wrap=True),
    ),
    table=(
        Column("tile", "tile", field_of("tile")),
        Column("tile_bytes_k", "K bytes", field_of("tile_bytes_k")),
        Column("schedule", "schedule", field_of("schedule")),
        Column("epilogue", "epilogue", field_of("epilogue")),
        Column("swap_ab", "swap", _swap),
        Column("stages", "stages", lambda r, c: c.stages(r)),
        Column("smem_bytes", "SharedStorage B", field_of("smem_bytes")),
        Column("smem_limit_bytes", "limit B", field_of("smem_limit_bytes")),
        Column("headroom_bytes", "headroom B", field_of("headroom_bytes")),
        Column("regs_per_thread", "regs", field_of("regs_per_thread")),
        Column("ctas_per_sm", "CTAs/SM", field_of("ctas_per_sm")),
        Column("verdict", "verdict", field_of("verdict")),
        Column("evidence", "evidence", field_of("evidence")),
        Column("reason", "reason", field_of("reason")),
    ),
    runtime_table=(
        Column("batch", "batch", field_of("batch")),
        Column("tile", "tile", field_of("tile")),
        Column("tile_bytes_k", "K bytes", field_of("tile_bytes_k")),
        Column("schedule", "schedule", field_of("schedule")),
        Column("stages", "stages", lambda r, c: c.stages(r)),
        Column("epilogue", "epilogue", field_of("epilogue")),
        Column("swap_ab", "swap", _swap),
        *_runtime_tail(tflops=True),
    ),
    evidence=CUTLASS_EVIDENCE,
    label=_cutlass_label,
    header=("cutlass",),
    verdict_after=". `stages`: `auto→N` is the carveout's resolved count, a bare number an explicit one.",
    smem="SharedStorage",
    chart_caption="SharedStorage per config against {target}'s opt-in limit ({limit} B); bar color = verdict, shades = "
                  "mainloop / epilogue / the rest. Evidence: {words}.",
    chart_title="SharedStorage vs opt-in limit on {target}, {tool} — evidence: {words}; not launched",
    chart_tool=lambda r: f"CUTLASS {r.get('cutlass_version')}",
    throughput_intro="Timed rows only; `best` = lowest median µs among rows whose verdict is `ok` (launched and every "
                     "output element verified against the reference), per batch size and epilogue (a C source is "
                     "extra work). Ties: {tie_rule}. µs is plain back-to-back launches; µs (graph) the same launches "
                     "replayed from a CUDA graph (no CPU launch gaps). GB/s counts the fewest bytes; % peak is against "
                     "the target's datasheet bandwidth, % copy against a measured device-to-device copy (read + "
                     "write).",
    tie_rule=CUTLASS_TIE_RULE,
    csv_drop=TRITON_FIELDS + PATH_FIELDS,
)


# --- Triton -------------------------------------------------------------------------------------------------------
# General for Triton kernels: the kernel, its op (triton-moe: the GEMM), the shape it serves (triton-moe: the batch
# size M, and the range of M the engine gives the same config), where the config came from, the config itself
# (BLOCK_*, num_warps, num_stages) and Triton's answer for it (metadata.shared, registers, spills).

TRITON_EVIDENCE = {
    "none": "not compiled: the reason says why",
    "predicted": "predicted by tileprobe's model of Triton {triton} for {arch}; nothing compiled, nothing launched",
    "compiled": "compiled by Triton {triton} for {arch}; `metadata.shared` read; nothing launched",
    "launched": "launched on {device}; what it showed is in the verdict",
    "verified": "launched on {device}, every output element checked against the fp64 reference",
}
TRITON_TIE_RULE = ("two configs tie when their medians differ by no more than the larger of their spreads (max - min "
                   "over the repeats); among configs tied with the fastest, the one with the smaller metadata.shared "
                   "wins (more headroom), then the lower config name")
TRITON_CUTLASS_ONLY = ("tile_bytes_k", "schedule", "cluster", "dtypes", "tactic", "smem_mainloop_bytes",
                       "smem_epilogue_bytes", "smem_kernel_bytes", "cutlass_cap_bytes", "predicted_stages",
                       "smem_limit_device_bytes", "cutlass_version",
                       "cutlass_source", "cutlass_hash", "nvcc_version", "host_compiler", "bad_groups", "worst_group",
                       "worst_ratio", "peer", "peer_us", "speedup")
_GEMM_ORDER = {"gate_up": 0, "down": 1}


def _m_text(r: dict, inside: str) -> object:
    rng, m = r.get("batch_range"), r.get("batch")
    if rng in (None, ""):
        return m
    starts = str(rng).lstrip(">=").split("..")[0] == str(m)
    return rng if starts else f"{m} ({inside}{rng})"


def _m(r: dict, c: Cells) -> str:
    """The batch size M, as the range of M the engine gives the same config where the row starts it ('1..32',
    '>=1024'), else 'M (in range)' (a --batch inside a range: '8 (in 7..12)')."""
    return c.fmt(_m_text(r, "in "))


def _m_short(r: dict, c: Cells) -> str:
    return c.fmt(_m_text(r, ""))


def _short_rule(rule) -> str:
    """'vllm/.../fused_moe.py::get_default_config' -> 'fused_moe.py::get_default_config'."""
    return str(rule).rsplit("/", 1)[-1]


_ORIGIN_WORDS = {"user": "user folder", "shipped": "shipped", "tune": "tuned"}


def config_from(r: dict, short: bool = False) -> str | None:
    """Where a row's config came from, in words: 'shipped FILE #KEY', 'user folder FILE #KEY', 'engine default
    (RULE)'; `short` leaves the file and rule out (the terminal says them once, under the table)."""
    origin, file, key = r.get("config_origin"), r.get("config_file"), r.get("config_key")
    if origin == "default":
        rule = r.get("config_rule")
        return "engine default" + (f" ({rule})" if rule and not short else "")
    if file:
        where = _ORIGIN_WORDS.get(origin or "", origin or "file")
        return (where if short else f"{where} {file}") + (f" #{key}" if key is not None else "")
    return r.get("config_source")


def _config_caption(rows: list[dict]) -> str | None:
    """Under a terminal table: the files and engine rules its `config from` cells name."""
    seen = []
    for r in rows:
        if r.get("config_origin") == "default" and r.get("config_rule"):
            seen.append(f"engine default = {_short_rule(r['config_rule'])}")
        elif r.get("config_file"):
            seen.append(f"{_ORIGIN_WORDS.get(r.get('config_origin') or '', r.get('config_origin') or 'file')} = "
                        f"{r['config_file']}")
    seen = list(dict.fromkeys(seen))
    return "config from: " + "; ".join(seen) if seen else None


def _from(short: bool) -> Reader:
    return lambda r, c: c.fmt(config_from(r, short))


def _blocks(r: dict, c: Cells) -> str:
    return "/".join(c.fmt(r.get(k)) for k in ("block_m", "block_n", "block_k"))


def _triton_label(r: dict, c: Cells) -> str:
    """BLOCK 128x256x64 G8 w8 s3: the BLOCK sizes the kernel takes (an audited kernel may take one or two, or
    none), GROUP_SIZE_M where it has one, num_warps, num_stages."""
    blocks = "x".join(str(r[k]) for k in ("block_m", "block_n", "block_k") if r.get(k) is not None)
    group = f"G{r['group_size_m']} " if r.get("group_size_m") is not None else ""
    return (f"BLOCK {blocks} " if blocks else "") + f"{group}w{c.fmt(r.get('num_warps'))} s{c.fmt(r.get('stages'))}"


def _order(r: dict) -> tuple:
    return (_GEMM_ORDER.get(str(r.get("gemm")), 2), str(r.get("gemm") or ""), int(r.get("batch") or 0),
            str(r.get("device_name") or ""), str(r.get("config") or ""))


TRITON_REPORT = ReportSpec(
    terminal=(
        Column("kernel", "kernel", field_of("kernel"), show="varies"),
        Column("gemm", "GEMM", field_of("gemm")),
        Column("batch", "M", _m_short),
        Column("config_from", "config from", _from(True), wrap=True, min_width=12),
        Column("block", "BLOCK_M/N/K", _blocks),
        Column("num_warps", "num_warps", field_of("num_warps")),
        Column("stages", "stages", field_of("stages")),
        Column("smem_bytes", "shared B", field_of("smem_bytes")),
        Column("headroom_bytes", "headroom B", field_of("headroom_bytes")),
        Column("verdict", "verdict", raw("verdict")),
    ),
    terminal_wide=(Column("regs_per_thread", "regs", field_of("regs_per_thread")),
                   Column("spill_bytes", "spills B", field_of("spill_bytes")),
                   Column("evidence", "evidence", lambda r, c: r.get("evidence") or ""),
                   Column("reason", "reason", lambda r, c: r.get("reason") or "", wrap=True, min_width=16)),
    terminal_runtime=(
        Column("gemm", "GEMM", field_of("gemm")),
        Column("batch", "M", field_of("batch")),
        Column("config_from", "config from", _from(True), wrap=True, min_width=12),
        Column("block", "BLOCK_M/N/K", _blocks),
        Column("num_warps", "num_warps", field_of("num_warps")),
        Column("stages", "stages", field_of("stages")),
        Column("verdict", "verdict", raw("verdict")),
        Column("us_median", "µs", field_of("us_median")),
        Column("us_graph_median", "µs graph", field_of("us_graph_median")),
        Column("gbps", "GB/s", field_of("gbps", 0)),
    ),
    terminal_runtime_wide=(
        Column("rel_err", "rel_err", lambda r, c: c.fmt(r["rel_err"], 4) if r.get("rel_err") is not None else "-"),
        Column("reason", "reason", lambda r, c: (r.get("reason") or "") if r["verdict"] != "ok" else "", wrap=True),
    ),
    table=(
        Column("kernel", "kernel", field_of("kernel")),
        Column("gemm", "GEMM", field_of("gemm")),
        Column("batch", "M", _m),
        Column("device_name", "device", field_of("device_name"), show="varies"),
        Column("config_from", "config from", _from(False)),
        Column("block_m", "BLOCK_M", field_of("block_m")),
        Column("block_n", "BLOCK_N", field_of("block_n")),
        Column("block_k", "BLOCK_K", field_of("block_k")),
        Column("group_size_m", "GROUP_M", field_of("group_size_m")),
        Column("num_warps", "num_warps", field_of("num_warps")),
        Column("stages", "num_stages", field_of("stages")),
        Column("swap_ab", "SWAP_AB", lambda r, c: "on" if r.get("swap_ab") else "off", show="varies"),
        Column("smem_bytes", "metadata.shared B", field_of("smem_bytes")),
        Column("predicted_smem_bytes", "predicted B", field_of("predicted_smem_bytes"), show="present"),
        Column("prediction", "prediction", field_of("prediction"), show="present"),
        Column("smem_limit_bytes", "limit B", field_of("smem_limit_bytes")),
        Column("headroom_bytes", "headroom B", field_of("headroom_bytes")),
        Column("regs_per_thread", "regs", field_of("regs_per_thread")),
        Column("spill_bytes", "spills B", field_of("spill_bytes")),
        Column("autotune_dropped", "autotune dropped", field_of("autotune_dropped"), show="present"),
        Column("verdict", "verdict", field_of("verdict")),
        Column("evidence", "evidence", field_of("evidence")),
        Column("reason", "reason", field_of("reason")),
    ),
    runtime_table=(
        Column("batch", "M", field_of("batch")),
        Column("config_from", "config from", _from(False)),
        Column("block_m", "BLOCK_M", field_of("block_m")),
        Column("block_n", "BLOCK_N", field_of("block_n")),
        Column("block_k", "BLOCK_K", field_of("block_k")),
        Column("group_size_m", "GROUP_M", field_of("group_size_m")),
        Column("num_warps", "num_warps", field_of("num_warps")),
        Column("stages", "num_stages", field_of("stages")),
        *_runtime_tail(tflops=False),
    ),
    evidence=TRITON_EVIDENCE,
    label=_triton_label,
    header=("triton",),
    order=_order,
    terminal_split="device_name",
    terminal_caption=_config_caption,
    verdict_after=". Rows by GEMM, then M (a range: the batch sizes the engine gives this config); `config from`: the "
                  "engine config file and its entry key, or the engine's default rule.",
    not_launched="",
    smem="metadata.shared",
    chart_caption="metadata.shared per config against {target}'s opt-in limit ({limit} B); bar color = verdict. "
                  "Evidence: {words}.",
    chart_title="metadata.shared vs opt-in limit on {target}, {tool} — evidence: {words}; not launched",
    chart_tool=lambda r: f"Triton {r.get('triton_version')}",
    throughput_intro="Timed rows only; `best` = lowest median µs among rows whose verdict is `ok` (launched and every "
                     "output element verified against the reference), per M. Ties: {tie_rule}. µs is plain "
                     "back-to-back launches; µs (graph) the same launches replayed from a CUDA graph (no CPU launch "
                     "gaps). GB/s counts the fewest bytes; % peak is against the target's datasheet bandwidth, % copy "
                     "against a measured device-to-device copy (read + write).",
    tie_rule=TRITON_TIE_RULE,
    runtime_evidence=True,
    best_caption="Best config per M (evidence: verified correct):",
    best_batch="M",
    best_epilogue=False,
    unit="config",
    chart_xlabel="metadata.shared bytes per CTA (read from the compiled kernel)",
    csv_first=("family", "target", "device_name", "cc", "gpu_index", "arch", "kernel", "kernel_file", "engine",
               "engine_hash", "triton_version", "quant", "gemm", "batch", "batch_range", "config_origin",
               "config_file", "config_key", "config_rule", "config_source", "block_m", "block_n", "block_k",
               "group_size_m", "num_warps", "stages", "smem_bytes", "smem_limit_bytes", "headroom_bytes",
               "regs_per_thread", "spill_bytes", "verdict", "evidence", "reason"),
    csv_drop=TRITON_CUTLASS_ONLY + PATH_FIELDS,
)

_SOURCE = re.compile(r"^(?:(?P<origin>[a-z]+):)?(?P<file>.+)#(?P<key>\d+)$")


def source_fields(source: str | None) -> dict:
    """config_origin / config_file / config_key of a config_source text: 'default', 'ORIGIN:FILE#KEY' (the sweep's
    user/shipped picks, the tuner's), or 'FILE#KEY' (check-configs: the file named, origin not in the text)."""
    if source == "default":
        return {"config_origin": "default", "config_file": None, "config_key": None}
    m = _SOURCE.match(str(source or ""))
    if not m:
        return {"config_origin": None, "config_file": None, "config_key": None}
    return {"config_origin": m["origin"], "config_file": m["file"], "config_key": int(m["key"])}


_RANGE = re.compile(r"\bM(=\d+(?:\.\.\d+)?|>=\d+)\s")


def batch_range_of(problem: str | None) -> str | None:
    """'qwen3 M=1..32 E=128 ...' -> '1..32'; 'M>=1024 ...' -> '>=1024'; 'M=64' -> '64' (the sweep's problem text)."""
    m = _RANGE.search(str(problem or "") + " ")
    return None if not m else m.group(1).lstrip("=")


__all__ = ["CUTLASS_REPORT", "TRITON_REPORT", "Cells", "Column", "ReportSpec", "batch_range_of", "config_from",
           "evidence_text", "field_of", "source_fields", "visible"]
