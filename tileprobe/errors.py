"""Typed errors. Each carries the numbers behind it; the CLI turns UsageError into one line and exit code 2."""

from __future__ import annotations


class TileprobeError(Exception):
    """Base class for every error tileprobe raises on purpose."""


class UsageError(TileprobeError):
    """Bad input or a missing tool: the user must change something. One line, exit code 2."""


class ToolchainError(UsageError):
    """nvcc or CUTLASS is missing, too old, or unusable."""


DOCTOR_HELP = "help: run `tileprobe doctor`"


class EnvironmentFault(ToolchainError):
    """The toolchain is broken for every config (a missing CUTLASS folder, an nvcc that does not run, a bad
    NVCC_PREPEND_FLAGS, a Triton that compiles nothing): the run stops before a row is written, and nothing is
    cached. `what` names the fault and its fix in one line; str() adds the doctor's help line."""

    def __init__(self, what: str, log: str = "") -> None:
        super().__init__(f"{what}\n{DOCTOR_HELP}")
        self.what = what
        self.log = log


class UnsupportedConfig(TileprobeError):
    """CUTLASS cannot build this config for the family (reason says why)."""


class CompileError(TileprobeError):
    """nvcc failed. `log` is the full compiler output."""

    def __init__(self, message: str, log: str = "") -> None:
        super().__init__(message)
        self.log = log


class SmemStaticAssert(CompileError):
    """nvcc stopped on CUTLASS's shared-memory static_assert."""

    def __init__(self, message: str, log: str = "", required: int | None = None, limit: int | None = None) -> None:
        super().__init__(message, log)
        self.required = required
        self.limit = limit


class OutOfResources(TileprobeError):
    """A config needs more of a per-block resource than the device allows (Triton's name, with the numbers)."""

    def __init__(self, resource: str, required: int, limit: int) -> None:
        super().__init__(f"{resource} {required} B > opt-in {limit} B by {required - limit} B")
        self.resource = resource
        self.required = required
        self.limit = limit


class HarnessError(TileprobeError):
    """A harness process did not give a usable answer (crash, hang, garbage)."""
