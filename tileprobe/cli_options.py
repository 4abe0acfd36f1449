"""Option types and value parsers the CLI's command modules share (tileprobe.cli, tileprobe.cli_audit)."""

from __future__ import annotations

import sys
from typing import Annotated, Optional

import typer
from rich.console import Console

from tileprobe.errors import UsageError
from tileprobe.reports.terminal import WIDTH
from tileprobe.triton.predicted import PredictionMismatch

CacheOpt = Annotated[Optional[str], typer.Option("--cache-dir", help="build cache (default: user cache dir)")]

NvccOpt = Annotated[Optional[str], typer.Option("--nvcc", help="path to nvcc")]
CompileAllOpt = Annotated[bool, typer.Option("--compile-all", help="Triton launches (triton-moe, audit): compile every launch, even those tileprobe answers exactly (default: predictor first, compile only what it cannot predict; the audit sizes those with Triton's own allocation pass)")]
VerifySeedOpt = Annotated[Optional[int], typer.Option("--verify-seed", help="the --verify sample's seed (default: a fresh one, printed and recorded)")]
RulesOffOpt = Annotated[bool, typer.Option("--rules-off", help="read an engine release (or a modified copy) that tileprobe's manifest does not match, with every stated rule off (each launch sized or compiled by Triton); a banner says so (default: such a release is refused, exit 2)")]
AnyTritonOpt = Annotated[bool, typer.Option("--any-triton", help="size and compile with the installed Triton even when it is not the release the engines pin (its bytes are that release's; every stated rule keyed by another Triton declines)")]
VerifyOpt = Annotated[int, typer.Option("--verify", metavar="N", help="Triton launches (triton-moe, audit): also compile a random sample of N predicted (audit: or sized) launches (seed printed and recorded); exit 1 naming each whose bytes differ")]


# the CLI's console: the terminal's width on a terminal, WIDTH in a log
console = Console(width=None if sys.stdout.isatty() else WIDTH)


def mismatch_exit(exc: PredictionMismatch) -> None:
    """--verify found predicted launches whose compile differs: one line each (launch, predicted, compiled), exit 1."""
    sys.stdout.writelines(f"MISMATCH {line}\n" for line in exc.lines)
    sys.stderr.write(f"tileprobe: {exc}\n")
    raise typer.Exit(1)


def split_csv(values: list[str] | None) -> list[str] | None:
    if not values:
        return None
    return [v.strip() for item in values for v in item.split(",") if v.strip()]


def ints(values: list[str] | None, what: str) -> list[int] | None:
    items = split_csv(values)
    if items is None:
        return None
    out = []
    for v in items:
        if v == "auto":
            out.append(0)
            continue
        try:
            out.append(int(v))
        except ValueError:
            raise UsageError(f"{what}: {v!r} is not a whole number") from None
    return out
