"""What tileprobe.audit.backends answers (Selection: the backend, whether it is a Triton backend, the audit entries it
runs, the engine line that chose it) and what its two engines' selections share: the target's stand-in device for
the engine's text, the trace of the lines the engine ran, the line naming the backend.
"""

from __future__ import annotations

import ast
import contextlib
import logging
import sys
from dataclasses import dataclass, field

from tileprobe.audit import capture
from tileprobe.audit.engine_text import EngineTextError, TextModules
from tileprobe.lazy import LazyModule
from tileprobe.targets import Target

torch = LazyModule("torch")

ARCHITECTURES = {"qwen3_moe": "Qwen3MoeForCausalLM", "gpt_oss": "GptOssForCausalLM",
                 "minimax_m1": "MiniMaxM1ForCausalLM", "deepseek_v3": "DeepseekV3ForCausalLM",
                 "kimi_k2": "DeepseekV3ForCausalLM", "qwen3_next": "Qwen3NextForCausalLM"}
TORCH_CUDA = "13.0"  # torch.version.cuda of the engines' CUDA 13 builds (a CPU torch answers None)
DTYPES = {"bf16": "bfloat16", "fp16": "float16", "fp32": "float32"}


@dataclass(frozen=True)
class Selection:
    engine: str
    backend: str  # as the engine spells it (vLLM: TRITON_ATTN, ...; SGLang: triton, ...)
    triton: bool  # a Triton backend: its kernels are what tileprobe audit compiles
    line: str  # file:line inside the wheel whose text names the backend and that ran
    forced: bool = False
    valid: tuple[str, ...] = ()  # every backend the engine would accept here, best first (vLLM: priority order)
    refused: dict = field(default_factory=dict)  # backend -> the engine's reasons, for those ranked above it
    notes: tuple[str, ...] = ()  # what the selection read other than as the engine pins it (TextModules.notes)


def is_triton(engine: str, backend: str) -> bool:
    return backend == "triton" if engine == "sglang" else backend.startswith("TRITON_")


@contextlib.contextmanager
def device(target: Target, mods: TextModules):
    """torch.cuda answering as the target, torch.version.cuda as a CUDA build, the served modules in sys.modules;
    all put back after."""
    answers = {**capture.cuda_answers(target), "is_initialized": lambda: True}
    before = {k: getattr(torch.cuda, k) for k in answers}
    cuda_before = torch.version.cuda
    try:
        for k, v in answers.items():
            setattr(torch.cuda, k, v)
        torch.version.cuda = cuda_before or TORCH_CUDA
        with mods.active():
            yield
    finally:
        for k, v in before.items():
            setattr(torch.cuda, k, v)
        torch.version.cuda = cuda_before


def function_node(mods: TextModules, module: str, function: str) -> ast.FunctionDef:
    return next(n for n in ast.walk(mods.module(module)._tree) if isinstance(n, ast.FunctionDef) and n.name == function)


def naming_line(mods: TextModules, module: str, function: str, ran: set, token: str) -> str:
    """file:line of the node naming `token` (a string constant or an attribute) inside `function` of `module`, in
    a statement that ran (the last such in the file)."""
    mod = mods.module(module)
    fn = function_node(mods, module, function)
    best = None
    for stmt in ast.walk(fn):
        if not isinstance(stmt, ast.stmt) or stmt is fn or isinstance(stmt, (ast.If, ast.For, ast.While, ast.With,
                                                                              ast.Try)):
            continue
        if stmt.lineno not in ran:
            continue
        for node in ast.walk(stmt):
            if (isinstance(node, ast.Constant) and node.value == token) or \
                    (isinstance(node, ast.Attribute) and node.attr == token):
                best = max(best or 0, node.lineno)
    if best is None:
        raise EngineTextError(f"no line of {mod._rel} {function} that ran names {token}")
    return f"{mod._rel}:{best}"


@contextlib.contextmanager
def tracing(files: set[str], ran: dict):
    """Record (function name -> lines) run in the given wheel files."""
    before = sys.gettrace()

    def trace(frame, event, arg):
        if frame.f_code.co_filename not in files:
            return None
        lines = ran.setdefault(frame.f_code.co_name, set())

        def local(frame, event, arg):
            if event == "line":
                lines.add(frame.f_lineno)
            return local
        return local

    sys.settrace(trace)
    try:
        yield
    finally:
        sys.settrace(before)


@contextlib.contextmanager
def quiet(logger: str):
    log = logging.getLogger(logger)
    before = log.propagate, log.handlers[:]
    log.propagate, log.handlers[:] = False, [logging.NullHandler()]
    try:
        yield
    finally:
        log.propagate, log.handlers[:] = before[0], before[1]
