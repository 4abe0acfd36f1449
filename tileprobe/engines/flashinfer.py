"""FlashInfer as an engine: where its MoE GEMM sources live, which tactics it tries, and which it drops.

Pure Python, no import of flashinfer, no work at import time. Everything is read from the installed package's own
C++ sources (TensorRT-LLM's `cutlass_heuristic.cpp`, the MoE TMA warp-specialized dispatch and traits headers), so a
user can point at another FlashInfer install and diff. A file that is missing or no longer has the structure read
here raises UsageError naming that file: we never guess a tactic list.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from tileprobe.errors import UsageError
from tileprobe.backends.cutlass.toolchain import hash_tree, package_dir

_CSRC = Path("data") / "csrc" / "nv_internal"
_KERNELS = _CSRC / "tensorrt_llm" / "kernels" / "cutlass_kernels"
HEURISTIC = _KERNELS / "cutlass_heuristic.cpp"
DISPATCH = _KERNELS / "moe_gemm" / "moe_gemm_template_dispatch_tma_ws.h"
TRAITS = _KERNELS / "moe_gemm" / "moe_tma_warp_specialized_traits.h"
GENERATOR = Path("jit") / "gemm" / "cutlass" / "generate_kernels.py"
JIT_FUSED_MOE = Path("jit") / "fused_moe.py"


@dataclass(frozen=True)
class Tactic:
    """One engine tile config, spelled as the engine spells it (K in bytes of the activation type)."""

    name: str  # e.g. CtaShape128x256x64B
    tile_m: int
    tile_n: int
    k_bytes: int
    cluster_m: int = 1
    cluster_n: int = 1

    def k_elements(self, act_bits: int) -> int:
        """The CUTLASS tile K, as the dispatch's SHAPE_CASE computes it: bytes * 8 / bits(activation)."""
        return self.k_bytes * 8 // act_bits


@dataclass(frozen=True)
class PruneRule:
    """A tactic the engine removes before trying it, with the engine's own words for why."""

    tactic: str  # engine tile name
    when: str  # "grouped" or "grouped, fp8 activations"
    reason: str


@dataclass(frozen=True)
class FlashinferTree:
    root: Path  # the flashinfer package directory (holds data/ and jit/)
    version: str
    include_dirs: tuple[Path, ...]  # cutlass/include, cutlass/tools/util/include, cutlass_extensions/include
    cccl_include_dirs: tuple[Path, ...]  # FlashInfer's vendored CCCL, put first on its nvcc line
    tree_hash: str

    def label(self) -> str:
        return f"flashinfer {self.version}"

    def path(self, rel: Path) -> Path:
        return self.root / rel


# ----------------------------------------------------------------------------------------------------------------
# Finding the package
# ----------------------------------------------------------------------------------------------------------------


def find_flashinfer(explicit: str | Path | None = None) -> FlashinferTree:
    """The installed flashinfer package, or `explicit`: a flashinfer package folder or a folder that holds one."""
    if explicit is not None:
        base = Path(explicit).expanduser().resolve()
        root = next((c for c in (base, base / "flashinfer") if (c / _KERNELS).is_dir()), None)
        if root is None:
            raise UsageError(f"no flashinfer sources at {base} (looked for {_KERNELS})")
    else:
        root = package_dir("flashinfer")
        if root is None:
            raise UsageError("flashinfer is not installed: pip install flashinfer-python, or pass its folder")
        root = root.resolve()
    return _tree(root)


@lru_cache(maxsize=8)
def _tree(root: Path) -> FlashinferTree:
    dirs = (
        root / "data" / "cutlass" / "include",
        root / "data" / "cutlass" / "tools" / "util" / "include",
        root / _CSRC / "tensorrt_llm" / "cutlass_extensions" / "include",
    )
    for d in dirs:
        if not d.is_dir():
            raise UsageError(f"flashinfer at {root} lacks the header folder {d}")
    cccl = tuple(d for d in (root / "data" / "cccl" / "cub", root / "data" / "cccl" / "libcudacxx" / "include")
                 if d.is_dir())
    # The launcher, dispatch and heuristic change the kernels as much as CUTLASS does, so they are hashed too.
    hashed = dirs + (root / _KERNELS,)
    return FlashinferTree(root, _read_version(root), dirs, cccl, hash_tree(hashed))


def _read_version(root: Path) -> str:
    """Version from the dist-info METADATA next to the package; `_build_meta.py` for a source tree without one."""
    for meta in sorted(root.parent.glob("flashinfer_python-*.dist-info/METADATA")):
        text = meta.read_text(errors="replace")
        m = re.search(r"^Version:\s*(\S+)\s*$", text, re.M)
        if m and re.search(r"^Name:\s*flashinfer[-_]python\s*$", text, re.M | re.I):
            return m.group(1)
    build_meta = root / "_build_meta.py"
    if build_meta.is_file():
        m = re.search(r"^__version__\s*=\s*['\"]([^'\"]+)['\"]", build_meta.read_text(errors="replace"), re.M)
        if m:
            return m.group(1)
    raise UsageError(f"cannot read the flashinfer version: no flashinfer_python-*.dist-info/METADATA beside {root}")


def engine_label(explicit: str | Path | None = None) -> str:
    """E.g. 'flashinfer 0.7.4'."""
    return find_flashinfer(explicit).label()


# ----------------------------------------------------------------------------------------------------------------
# Reading C++ source
# ----------------------------------------------------------------------------------------------------------------


def _read(tree: FlashinferTree, rel: Path) -> tuple[Path, str]:
    path = tree.path(rel)
    if not path.is_file():
        raise UsageError(f"flashinfer source file missing: {path}")
    return path, path.read_text(errors="replace")


def _strip_comments(text: str) -> str:
    text = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)
    return re.sub(r"//[^\n]*", "", text)


def _function_body(text: str, name: str, path: Path) -> str:
    """The brace-balanced body of the first *definition* of `name` (declarations end in ';' and are skipped)."""
    for m in re.finditer(rf"\b{re.escape(name)}\s*\(", text):
        i = m.end()
        depth = 1
        while i < len(text) and depth:
            depth += {"(": 1, ")": -1}.get(text[i], 0)
            i += 1
        j = i
        while j < len(text) and text[j] not in "{;":
            j += 1
        if j >= len(text) or text[j] == ";":
            continue
        start, depth, k = j, 0, j
        while k < len(text):
            depth += {"{": 1, "}": -1}.get(text[k], 0)
            k += 1
            if depth == 0:
                return text[start:k]
        break
    raise UsageError(f"structure not recognized in {path}: no definition of {name}()")


def _not_fast_build(body: str) -> str:
    """Drop `#ifdef FAST_BUILD ... #else` (the engine's reduced debug build), keep the release branch."""
    return re.sub(r"#ifdef\s+FAST_BUILD.*?#else", "", body, flags=re.S)


_TILE_NAME = re.compile(r"CtaShape(\d+)x(\d+)x(\d+)B\b")


def _tactic(name: str, cm: int = 1, cn: int = 1) -> Tactic:
    m = _TILE_NAME.fullmatch(name)
    assert m, name
    return Tactic(name, int(m.group(1)), int(m.group(2)), int(m.group(3)), cm, cn)


# ----------------------------------------------------------------------------------------------------------------
# SM120 tactics
# ----------------------------------------------------------------------------------------------------------------


def sm120_candidates(tree: FlashinferTree | None = None) -> list[Tactic]:
    """Every tile get_candidate_configs_sm120 lists (release build), in the engine's order, before pruning."""
    tree = tree or find_flashinfer()
    path, text = _read(tree, HEURISTIC)
    body = _not_fast_build(_function_body(text, "get_candidate_configs_sm120", path))
    m = re.search(r"all_tiles\s*\[\s*\]\s*=\s*\{(.*?)\}\s*;", _strip_comments(body), re.S)
    if not m:
        raise UsageError(f"structure not recognized in {path}: get_candidate_configs_sm120 has no all_tiles[] list")
    names = re.findall(r"CutlassTileConfigSM120::(CtaShape\d+x\d+x\d+B)\b", m.group(1))
    if not names or len(names) != m.group(1).count("CutlassTileConfigSM120::"):
        raise UsageError(f"structure not recognized in {path}: unreadable all_tiles[] entries")
    return [_tactic(n) for n in names]


def sm120_prune_rules(tree: FlashinferTree | None = None) -> list[PruneRule]:
    """The grouped-GEMM pruning of get_candidate_configs_sm120: the `never_dispatches` switch, with its comment."""
    tree = tree or find_flashinfer()
    path, text = _read(tree, HEURISTIC)
    body = _function_body(text, "get_candidate_configs_sm120", path)
    block = re.search(
        r"((?:[ \t]*//[^\n]*\n)*)[ \t]*if\s*\(\s*config\s*&\s*CutlassGemmConfig::GROUPED_GEMM\s*\)\s*\{\s*"
        r"(bool\s+const\s+fp8_act\s*=\s*config\s*&\s*CutlassGemmConfig::FP8FP4_MIXED\s*;.*?)"
        r"result\.erase\(\s*std::remove_if\(.*?never_dispatches", body, re.S)
    if not block:
        raise UsageError(f"structure not recognized in {path}: no grouped-GEMM never_dispatches pruning in "
                         "get_candidate_configs_sm120")
    comment = " ".join(line.strip().lstrip("/").strip() for line in block.group(1).splitlines() if line.strip())
    rules: list[PruneRule] = []
    pending: list[str] = []
    for m in re.finditer(r"case\s+CutlassTileConfigSM120::(CtaShape\d+x\d+x\d+B)\s*:|return\b([^;]*);",
                         block.group(2)):
        if m.group(1):
            pending.append(m.group(1))
            continue
        ret = m.group(2).strip()
        when = {"true": "grouped", "fp8_act": "grouped, fp8 activations"}.get(ret)
        if when is None and ret != "false":
            raise UsageError(f"structure not recognized in {path}: never_dispatches returns {ret!r}")
        for name in pending if when else []:
            quote = f'"{comment}"' if comment else "(no comment in source)"
            rules.append(PruneRule(name, when, f"flashinfer drops {name} for {when} "
                                               f"(cutlass_heuristic.cpp, get_candidate_configs_sm120: {quote})"))
        pending = []
    if not rules:
        raise UsageError(f"structure not recognized in {path}: never_dispatches drops nothing")
    return rules


def sm120_tactics(dtypes: int = 0, tree: FlashinferTree | None = None) -> list[Tactic]:
    """The tactics the engine tries for grouped GEMM on SM120 with `dtypes` (0 = NVFP4, 1 = MXFP8 x MXFP4)."""
    if dtypes not in (0, 1):
        raise UsageError(f"SM120 MoE dtypes must be 0 (nvfp4) or 1 (mxfp8 x mxfp4), not {dtypes}")
    tree = tree or find_flashinfer()
    dropped = {r.tactic for r in sm120_prune_rules(tree) if r.when == "grouped" or dtypes == 1}
    return [t for t in sm120_candidates(tree) if t.name not in dropped]


def sm120_pruned(dtypes: int = 0, tree: FlashinferTree | None = None) -> list[PruneRule]:
    """The rules that remove a candidate for `dtypes` (what sm120_tactics left out, and why)."""
    return [r for r in sm120_prune_rules(tree or find_flashinfer()) if r.when == "grouped" or dtypes == 1]


# ----------------------------------------------------------------------------------------------------------------
# SM90 grouped tactics (the Hopper branch of the same launcher)
# ----------------------------------------------------------------------------------------------------------------

_EXPR_OK = re.compile(r"^[\s()0-9|&=!<>]*(?:\b(?:tile_m|tile_n|tile_k)\b[\s()0-9|&=!<>]*)*$")


def _predicate(text: str, func: str, var: str, path: Path):
    """`bool const var = <expr>;` from a small tile predicate, as a Python function of (tile_m, tile_n, tile_k)."""
    body = _not_fast_build(_strip_comments(_function_body(text, func, path)))
    m = re.search(rf"bool\s+const\s+{var}\s*=\s*(.*?);", body, re.S)
    if not m or not _EXPR_OK.match(m.group(1)):
        raise UsageError(f"structure not recognized in {path}: {func}() has no readable `{var}` expression")
    expr = m.group(1).replace("&&", " and ").replace("||", " or ").replace("!=", "<>").replace("!", " not ")
    expr = expr.replace("<>", "!=")
    code = compile(f"({expr})", str(path), "eval")
    return lambda tm, tn, tk: bool(eval(code, {"__builtins__": {}}, {"tile_m": tm, "tile_n": tn, "tile_k": tk}))


def sm90_tactics(tree: FlashinferTree | None = None) -> list[Tactic]:
    """Grouped (non weight-only) SM90 candidates: get_candidate_tiles_sm90's tiles x the clusters
    get_candidate_configs_sm90 adds (1x1 always, 2x1 / 1x2 / 2x2 where the tile supports multicast)."""
    tree = tree or find_flashinfer()
    path, text = _read(tree, HEURISTIC)
    body = _strip_comments(_not_fast_build(_function_body(text, "get_candidate_tiles_sm90", path)))
    m = re.search(r"if\s*\(\s*config\s*&\s*CutlassGemmConfig::GROUPED_GEMM\s*\)\s*\{\s*"
                  r"if\s*\(\s*config\s*&\s*CutlassGemmConfig::WEIGHT_ONLY\s*\)\s*\{.*?\}\s*else\s*\{\s*"
                  r"return\s*\{(.*?)\}\s*;", body, re.S)
    if not m:
        raise UsageError(f"structure not recognized in {path}: no grouped tile list in get_candidate_tiles_sm90")
    names = re.findall(r"CutlassTileConfigSM90::(CtaShape\d+x\d+x\d+B)\b", m.group(1))
    if not names:
        raise UsageError(f"structure not recognized in {path}: empty grouped tile list in get_candidate_tiles_sm90")
    cfg = _not_fast_build(_strip_comments(_function_body(text, "get_candidate_configs_sm90", path)))
    for shape in ("1x1x1", "2x1x1", "1x2x1", "2x2x1"):
        if f"ClusterShape_{shape}" not in cfg:
            raise UsageError(f"structure not recognized in {path}: get_candidate_configs_sm90 lacks {shape}")
    along_m = lambda t: _predicate(text, "sm90_supports_mcast_along_m", "supported_mn", path)(*t) and \
        _predicate(text, "sm90_supports_mcast_along_m", "supported_k", path)(*t)  # noqa: E731
    along_n = lambda t: _predicate(text, "sm90_supports_mcast_along_n", "supported_mn", path)(*t) and \
        _predicate(text, "sm90_supports_mcast_along_n", "supported_k", path)(*t)  # noqa: E731
    out: list[Tactic] = []
    for name in names:
        t = _tactic(name)
        mnk = (t.tile_m, t.tile_n, t.k_bytes)
        m_ok, n_ok = along_m(mnk), along_n(mnk)
        out.append(t)
        if m_ok:
            out.append(_tactic(name, 2, 1))
        if n_ok:
            out.append(_tactic(name, 1, 2))
        if m_ok and n_ok:
            out.append(_tactic(name, 2, 2))
    return out


# ----------------------------------------------------------------------------------------------------------------
# Dispatch: which tiles have a case, and which (dtype pair, epilogue) combos are valid
# ----------------------------------------------------------------------------------------------------------------


def dispatch_tiles(sm: int, tree: FlashinferTree | None = None) -> list[str]:
    """Tile names with a SHAPE_CASE for `sm` (90 or 120) in moe_gemm_template_dispatch_tma_ws.h."""
    tree = tree or find_flashinfer()
    path, text = _read(tree, DISPATCH)
    found = re.findall(rf"SHAPE_CASE\(\s*{sm}\s*,\s*(\d+)\s*,\s*(\d+)\s*,\s*(\d+)\s*\)", _strip_comments(text))
    if not found:
        raise UsageError(f"structure not recognized in {path}: no SHAPE_CASE({sm}, ...) dispatch cases")
    return [f"CtaShape{m}x{n}x{k}B" for m, n, k in found]


# Clauses of the traits' validity functions that admit each family dtype pair, with their words for an error.
_PAIR_CLAUSES = {
    ("isValidSM120MOESpecialisation", 0): (
        r"is_same<T,\s*Fp4Type>::value\s*&&\s*cutlass::platform::is_same<T,\s*WeightType>::value",
        "nvfp4 x nvfp4: is_same<T, Fp4Type> && is_same<T, WeightType>"),
    ("isValidSM120MOESpecialisation", 1): (
        r"is_same<T,\s*__nv_fp8_e4m3>::value\s*&&\s*cutlass::platform::is_same<WeightType,\s*Fp4Type>::value",
        "mxfp8 x mxfp4: is_same<T, __nv_fp8_e4m3> && is_same<WeightType, Fp4Type>"),
    ("isValidHopperMOESpecialisation", 2): (
        r"\(\s*cutlass::platform::is_same<T,\s*WeightType>::value\s*\|\|",
        "fp8 x fp8: (is_same<T, WeightType> || ..."),
}


def dispatch_combos(tree: FlashinferTree | None = None) -> dict[int, list[tuple[int, str]]]:
    """{sm: [(dtypes, epilogue)]} that the MoE TMA WS dispatch admits (SM120 and SM90), read from the validity
    functions it calls (`isValidSM120MOESpecialisation`, `isValidHopperMOESpecialisation` in
    moe_tma_warp_specialized_traits.h). Activation fusion is reported as refused where the source refuses it."""
    tree = tree or find_flashinfer()
    dpath, dtext = _read(tree, DISPATCH)
    for func in ("isValidSM120MOESpecialisation", "isValidHopperMOESpecialisation"):
        if func not in dtext:
            raise UsageError(f"structure not recognized in {dpath}: the dispatch no longer calls {func}")
    path, text = _read(tree, TRAITS)
    text = _strip_comments(text)
    out: dict[int, list[tuple[int, str]]] = {}
    for (func, dtypes), (clause, words) in _PAIR_CLAUSES.items():
        body = _function_body(text, func, path)
        if not re.search(clause, body):  # a pair dropped silently would be a guess: stop, naming file and clause
            raise UsageError(f"structure not recognized in {path}: {func}() no longer has the clause `{words}`")
        sm = 120 if "SM120" in func else 90
        refuses = set()
        for b in re.finditer(r"Fusion\s*==\s*\w+::EpilogueFusion::(\w+)\s*\)\s*\{\s*([^;]*);", body):
            if not re.fullmatch(r"return\s+false", b.group(2).strip()):
                raise UsageError(f"structure not recognized in {path}: {func} has a fusion branch not read here")
            refuses.add(b.group(1))
        for epi in ("default", "finalize"):
            if epi.upper() not in refuses:
                out.setdefault(sm, []).append((dtypes, epi))
    if 120 not in out or 90 not in out:
        raise UsageError(f"structure not recognized in {path}: no recognizable SM120 / SM90 dtype clauses")
    return out
