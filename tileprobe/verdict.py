"""The one verdict vocabulary (harness JSON to CSV), and the evidence words that say how strong each claim is."""

from __future__ import annotations

from enum import Enum


class Evidence(str, Enum):
    """What was observed, weakest to strongest. Nothing claims more than its word."""
    NONE = "none"  # not built (unsupported) or the build failed
    PREDICTED = "predicted"  # from tileprobe's model of the CUTLASS builders only (--predict-only); nothing compiled
    SIZED = "sized"  # kernel types instantiated for the arch on the host; sizes read; no device code built
    COMPILED = "compiled"  # device code built by ptxas for the arch (registers, spills); not launched
    LAUNCHED = "launched"  # a launch was attempted on a GPU; what it showed is in the verdict
    VERIFIED = "verified"  # launched, and every output element checked against the independent reference

    def __str__(self) -> str:
        return self.value


class Verdict(str, Enum):
    # static (no GPU needed)
    FITS = "fits"  # SharedStorage <= the target's opt-in limit (sized or compiled; not launched)
    SMEM_OVER_LIMIT = "smem-over-limit"  # SharedStorage > the opt-in limit (sizes, or CUTLASS's static_assert)
    COMPILE_ERROR = "compile-error"
    UNSUPPORTED = "unsupported"  # cannot be built or run for this family/target; not compiled
    NOT_SELECTED = "not-selected"  # the engine runs another kernel here (the reason names it and its engine line)
    # compiled kernels on the model's path (tileprobe.audit.path): the three answers arch, gate, bytes
    NO_CODE = "no-code"  # the shipped binary (or the JIT's arch list) has no code that runs on the target
    REFUSED = "refused"  # the library's or the engine's own acceptance check refuses the launch's shapes there
    UNANSWERED = "unanswered"  # on the path, but tileprobe cannot answer it (the reason says why); never a pass
    # runtime
    OK = "ok"  # launched and every element of every group verified against the reference
    UNCHECKED = "unchecked"  # launched and ran, but no correctness check was made: launched evidence only
    LAUNCH_ERROR = "launch-error"  # can_implement / initialize / run / sync failed
    INCORRECT = "incorrect"
    TIMEOUT = "timeout"  # the point started and gave no answer in time
    CRASHED = "crashed"  # the point started and its process died or printed garbage
    NOT_RUN = "not-run"  # the harness ended before starting this point (nothing to blame the point for)
    NOT_RUNNABLE_HERE = "not-runnable-here"  # binary's arch differs from the device's; not launched

    def __str__(self) -> str:  # so f-strings and CSV show "fits", not "Verdict.FITS"
        return self.value

    @property
    def works(self) -> bool:
        """True when the config can be used: fits statically, or ran and was verified correct."""
        return self in (Verdict.FITS, Verdict.OK)

    @property
    def transient(self) -> bool:
        """Outcomes that a re-run of the same point may not repeat (a crash, a hang, a point never started)."""
        return self in (Verdict.CRASHED, Verdict.TIMEOUT, Verdict.NOT_RUN)

    @property
    def runtime(self) -> bool:
        return self in (Verdict.OK, Verdict.UNCHECKED, Verdict.LAUNCH_ERROR, Verdict.INCORRECT, Verdict.TIMEOUT,
                        Verdict.CRASHED, Verdict.NOT_RUN)


RUNTIME_FAILURES = (Verdict.LAUNCH_ERROR, Verdict.INCORRECT, Verdict.TIMEOUT, Verdict.CRASHED)
# A kernel on the model's path that would stop the engine there (tileprobe audit exits 1 on any)
PATH_FAILURES = (Verdict.SMEM_OVER_LIMIT, Verdict.COMPILE_ERROR, Verdict.NO_CODE, Verdict.REFUSED)


def evidence_for(verdict: Verdict, compiled: bool = False, predicted: bool = False) -> Evidence:
    """The evidence behind a verdict; `compiled` when device code was built (static rows with registers),
    `predicted` when the sizes come from the model alone."""
    if predicted and verdict in (Verdict.FITS, Verdict.SMEM_OVER_LIMIT, Verdict.NOT_RUNNABLE_HERE):
        return Evidence.PREDICTED  # nothing was built: a not-runnable-here row of a skipped config claims no more
    if verdict is Verdict.OK:
        return Evidence.VERIFIED
    if verdict.runtime and verdict is not Verdict.NOT_RUN:
        return Evidence.LAUNCHED
    if verdict in (Verdict.FITS, Verdict.SMEM_OVER_LIMIT, Verdict.NOT_RUNNABLE_HERE):
        return Evidence.COMPILED if compiled else Evidence.SIZED
    return Evidence.NONE
