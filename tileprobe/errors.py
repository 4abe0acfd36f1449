"""Typed errors. Each carries the numbers behind it; the CLI turns UsageError into one line and exit code 2."""

from __future__ import annotations


class TileprobeError(Exception):
    """Base class for every error tileprobe raises on purpose."""


class UsageError(TileprobeError):
    """Bad input or a missing tool: the user must change something. One line, exit code 2."""


class ToolchainError(UsageError):
    """nvcc or CUTLASS is missing, too old, or unusable."""


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
