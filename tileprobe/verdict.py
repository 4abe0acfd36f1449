"""The one verdict vocabulary, used from the harness's JSON to the CSV column."""

from __future__ import annotations

from enum import Enum


class Verdict(str, Enum):
    # static (no GPU needed)
    FITS = "fits"  # compiled; SharedStorage <= the target's opt-in limit (static evidence only)
    SMEM_OVER_LIMIT = "smem-over-limit"  # compiled or static_assert'ed; SharedStorage > the opt-in limit
    COMPILE_ERROR = "compile-error"
    UNSUPPORTED = "unsupported"  # CUTLASS cannot build this shape/schedule for the family; not compiled
    # runtime
    OK = "ok"  # launched and verified correct against the reference
    LAUNCH_ERROR = "launch-error"  # can_implement / initialize / run / sync failed
    INCORRECT = "incorrect"
    TIMEOUT = "timeout"
    CRASHED = "crashed"
    NOT_RUNNABLE_HERE = "not-runnable-here"  # binary's arch differs from the device's; not launched

    def __str__(self) -> str:  # so f-strings and CSV show "fits", not "Verdict.FITS"
        return self.value

    @property
    def works(self) -> bool:
        """True when the config can be used: fits statically, or ran correctly."""
        return self in (Verdict.FITS, Verdict.OK)

    @property
    def evidence(self) -> str:
        """How strong the claim behind this verdict is."""
        if self is Verdict.OK:
            return "verified-correct"
        if self in (Verdict.INCORRECT,):
            return "launched"
        if self in (Verdict.LAUNCH_ERROR, Verdict.TIMEOUT, Verdict.CRASHED):
            return "launch-attempted"
        if self in (Verdict.FITS, Verdict.SMEM_OVER_LIMIT, Verdict.NOT_RUNNABLE_HERE):
            return "static"
        return "none"
