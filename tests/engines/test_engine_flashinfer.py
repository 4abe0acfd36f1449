"""flashinfer-moe: the engine reader (plain unit tests) and the identity proof (nvcc).

The identity proof runs FlashInfer's own kernel generator from the installed package (without importing flashinfer),
compiles its instantiations exactly as FlashInfer's JIT does (NVFP4 gemm1 and gemm2 with swap off and on, MXFP8 x
MXFP4 gemm1 and gemm2, one sm_121a build in the sessions that draw sm_121a (see `_variants`), one SM90 FP8 cluster
2x1; and the gemm2 finalize tiles the committed blocklist blocks, with their swap-AB copies), puts them and
tileprobe's FlashinferMoeKernel for the same tactics into one translation unit per build, compiles it with nvcc's
host pass and the module's own flags, and checks that each FlashInfer launcher and tileprobe's entry point at the same
mangled kernel (see `_Identity`).
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import time
import types
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path

import pytest
from filelock import FileLock

from _nvcc_host import NVCC_TIMEOUT_S, entry_target, host_pass, relocations
from _session_draw import sm120_archs
from tileprobe.binary import elf
from tileprobe.engines import flashinfer as ef
from tileprobe.errors import UsageError

HARNESS = Path(__file__).resolve().parents[2] / "cutlass_harness"


def _installed() -> ef.FlashinferTree:
    try:
        return ef.find_flashinfer()
    except UsageError as exc:
        pytest.skip(str(exc))


def _fake_tree(tmp_path: Path, version: str = "9.9.9") -> Path:
    """A flashinfer-shaped folder with copies of the real sources the reader parses, and an empty header tree."""
    real = _installed().root
    site = tmp_path / "site"
    root = site / "flashinfer"
    for rel in (ef.HEURISTIC, ef.DISPATCH, ef.TRAITS):
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(real / rel, root / rel)
    for rel in ("data/cutlass/include", "data/cutlass/tools/util/include",
                "data/csrc/nv_internal/tensorrt_llm/cutlass_extensions/include"):
        (root / rel).mkdir(parents=True, exist_ok=True)
    version_h = Path("data/cutlass/include/cutlass/version.h")  # the engine's CUTLASS is found (and named) by it
    (root / version_h).parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(real / version_h, root / version_h)
    meta = site / f"flashinfer_python-{version}.dist-info" / "METADATA"
    meta.parent.mkdir()
    meta.write_text(f"Metadata-Version: 2.1\nName: flashinfer-python\nVersion: {version}\n")
    return root


# ---------------------------------------------------------------------------------------------------------------
# Reader (no nvcc)
# ---------------------------------------------------------------------------------------------------------------


def test_installed_label_version_and_includes():
    tree = _installed()
    meta = next(tree.root.parent.glob("flashinfer_python-*.dist-info/METADATA"))
    version = re.search(r"^Version:\s*(\S+)", meta.read_text(), re.M).group(1)
    assert ef.engine_label() == f"flashinfer {version}" == tree.label()
    assert all(d.is_dir() for d in tree.include_dirs)
    assert (tree.include_dirs[2] / "cutlass_extensions" / "epilogue" / "fusion" / "sm90_visitor_scatter.hpp").is_file()
    assert re.fullmatch(r"[0-9a-f]{16}", tree.tree_hash)


def test_sm120_candidates_match_an_independent_read():
    tree = _installed()
    text = (tree.root / ef.HEURISTIC).read_text()
    start = text.index("get_candidate_configs_sm120(\n")  # the definition, not the declaration in the header
    body = text[start:text.index("\nstd::vector<CutlassGemmConfig> get_candidate_configs(", start)]
    release = body[body.index("#else"):]  # skip the FAST_BUILD list
    listed = release[release.index("all_tiles"):release.index("};", release.index("all_tiles"))]
    expected = re.findall(r"CtaShape(\d+)x(\d+)x(\d+)B", listed)
    got = [(str(t.tile_m), str(t.tile_n), str(t.k_bytes)) for t in ef.sm120_candidates(tree)]
    assert got == expected and len(got) >= 4
    assert [t.name for t in ef.sm120_candidates(tree)] == [f"CtaShape{m}x{n}x{k}B" for m, n, k in expected]
    # Pruning: every tile the source drops for grouped GEMM is one with no SM120 dispatch case, and the FP8 rule
    # drops exactly the x64B tiles; the reasons quote the source.
    dispatch = set(ef.dispatch_tiles(120, tree))
    nvfp4 = [t.name for t in ef.sm120_tactics(0, tree)]
    mx = [t.name for t in ef.sm120_tactics(1, tree)]
    assert set(nvfp4) <= dispatch and set(mx) <= set(nvfp4)
    assert {n for n, _, _ in expected} and all(not n.endswith("x64B") for n in mx)
    for rule in ef.sm120_pruned(1, tree):
        assert rule.tactic in rule.reason and "cutlass_heuristic.cpp" in rule.reason and '"' in rule.reason
    assert {r.tactic for r in ef.sm120_pruned(0, tree)} == {f"CtaShape{m}x{n}x{k}B" for m, n, k in expected} - set(nvfp4)


def test_sm90_and_dispatch_combos():
    tree = _installed()
    sm90 = ef.sm90_tactics(tree)
    assert {t.name for t in sm90} <= set(ef.dispatch_tiles(90, tree))
    assert all((t.cluster_m, t.cluster_n) in {(1, 1), (2, 1), (1, 2), (2, 2)} for t in sm90)
    assert all(any(u.name == t.name and (u.cluster_m, u.cluster_n) == (1, 1) for u in sm90) for t in sm90)
    combos = ef.dispatch_combos(tree)
    assert set(combos[120]) == {(0, "default"), (0, "finalize"), (1, "default"), (1, "finalize")}
    assert set(combos[90]) == {(2, "default"), (2, "finalize")}


def test_explicit_root_reads_another_install(tmp_path):
    root = _fake_tree(tmp_path, "1.2.3")
    assert ef.engine_label(root) == "flashinfer 1.2.3"
    assert ef.engine_label(root.parent) == "flashinfer 1.2.3"  # the folder that holds the package works too
    assert [t.name for t in ef.sm120_candidates(ef.find_flashinfer(root))] == \
        [t.name for t in ef.sm120_candidates()]


@pytest.mark.parametrize("breakage", ["rename_list", "drop_function", "missing", "odd_prune"])
def test_broken_heuristic_names_the_file(tmp_path, breakage):
    root = _fake_tree(tmp_path)
    path = root / ef.HEURISTIC
    text = path.read_text()
    if breakage == "rename_list":
        text = text.replace("all_tiles[]", "tiles_all[]")
    elif breakage == "drop_function":
        text = text.replace("get_candidate_configs_sm120", "get_candidate_configs_sm12x")
    elif breakage == "odd_prune":
        text = text.replace("return fp8_act;", "return fp8_act && maybe;")
    if breakage == "missing":
        path.unlink()
    else:
        path.write_text(text)
    tree = ef.find_flashinfer(root)
    with pytest.raises(UsageError) as err:
        ef.sm120_tactics(1, tree)
    msg = str(err.value)
    assert str(path) in msg and "\n" not in msg


@pytest.mark.parametrize("pair", [("Fp4Type>::value &&\n", "nvfp4 x nvfp4"),
                                  ("__nv_fp8_e4m3>::value &&", "mxfp8 x mxfp4"),
                                  ("is_same<T, WeightType>::value ||", "fp8 x fp8")])
def test_a_dtype_clause_that_stops_matching_names_file_and_clause(tmp_path, pair):
    """A reworded validity clause must stop the read (one line, the file and the clause), never drop that pair."""
    needle, words = pair
    root = _fake_tree(tmp_path)
    path = root / ef.TRAITS
    text = path.read_text()
    func = "isValidHopperMOESpecialisation" if words == "fp8 x fp8" else "isValidSM120MOESpecialisation"
    start = text.index(f"bool {func}()")
    body_end = text.index("\n}\n", start)
    body = text[start:body_end]
    hit = re.search(re.escape(needle).replace(r"\ ", r"\s*").replace(r"\n", r"\s*"), body)
    assert hit, (needle, body)  # the real source has the clause; reword it as a later release might
    body = body[:hit.start()] + body[hit.start():hit.end()].replace("::value", "::value /*reworded*/ && true") \
        + body[hit.end():]
    path.write_text(text[:start] + body + text[body_end:])
    with pytest.raises(UsageError) as err:
        ef.dispatch_combos(ef.find_flashinfer(root))
    msg = str(err.value)
    assert str(path) in msg and func in msg and words in msg and "\n" not in msg
    p = subprocess.run([sys.executable, "-m", "tileprobe", "sweep", "--family", "flashinfer-moe", "--flashinfer-dir",
                        str(root), "--target", "rtx-pro-6000", "--predict-only", "--out", str(tmp_path / "o")],
                       capture_output=True, text=True, timeout=300)
    lines = [ln for ln in p.stderr.splitlines() if ln.strip()]
    assert p.returncode == 2 and len(lines) == 1 and words in lines[0] and "Traceback" not in p.stderr, p.stderr


def test_not_a_flashinfer_folder(tmp_path):
    with pytest.raises(UsageError, match=str(tmp_path)):
        ef.find_flashinfer(tmp_path)


# ---------------------------------------------------------------------------------------------------------------
# Identity proof (nvcc)
# ---------------------------------------------------------------------------------------------------------------

_INST = re.compile(r"#if[^\n]*\n\s*INSTANTIATE_TMA_WARP_SPECIALIZED_MOE_GEMM\((.*?)\);\s*\n#endif", re.S)


def _run_generator(fi_root: Path, out: Path, sm: str = "120") -> list[Path]:
    """FlashInfer's generate_kernels.py, loaded as a stand-alone package so that flashinfer itself is not imported."""
    gen_dir = fi_root / ef.GENERATOR.parent
    pkg_name = "_tileprobe_fi_cutlass_gen"
    pkg = types.ModuleType(pkg_name)
    pkg.__path__ = [str(gen_dir)]
    sys.modules[pkg_name] = pkg
    try:
        spec = importlib.util.spec_from_file_location(f"{pkg_name}.generate_kernels", gen_dir / "generate_kernels.py")
        mod = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = mod
        spec.loader.exec_module(mod)
        # As gen_cutlass_fused_moe_module does for each arch's module: generate_gemm_operations(dir, "120;120-real").
        mod.generate_gemm_operations(str(out), f"{sm};{sm}-real")
    finally:
        for name in [n for n in sys.modules if n.startswith(pkg_name)]:
            del sys.modules[name]
    return sorted(out.rglob(f"*grouped_sm{sm}*.generated.cu"))


_COMMON = ["-std=c++17", "-use_fast_math", "-DFLASHINFER_ENABLE_F16", "-DFLASHINFER_ENABLE_BF16",
           "-DFLASHINFER_ENABLE_FP8_E4M3", "-DFLASHINFER_ENABLE_FP8_E5M2", "-DNDEBUG", "-O3",
           "--expt-relaxed-constexpr", "-static-global-template-stub=false",
           "-DFLASHINFER_ENABLE_FP8_E8M0", "-DFLASHINFER_ENABLE_FP4_E2M1"]


def _module_flags(fi_root: Path, sm: str, gencode: str) -> list[str]:
    """The -D flags gen_cutlass_fused_moe_sm{sm}_module passes, read from jit/fused_moe.py, plus what FlashInfer's
    JIT adds to every CUDA source (jit/core.py gen_jit_spec, jit/cpp_ext.py build_cuda_cflags; for SM90 its
    sm90a_nvcc_flags), and the gencode of the GPU it is built for (SM121 builds the SM120 module for sm_121a)."""
    src = (fi_root / ef.JIT_FUSED_MOE).read_text()
    m = re.search(rf"def gen_cutlass_fused_moe_sm{sm}_module\(.*?\n(.*?)\n(?:def |\Z)", src, re.S)
    assert m, f"gen_cutlass_fused_moe_sm{sm}_module not found"
    module = [f for f in re.findall(r'"(-D[A-Za-z0-9_=]+)"', m.group(1)) if "PREBUILT_D" not in f]  # H20 variant
    assert "-DENABLE_FP4" in module and ("-DCOMPILE_BLACKWELL_SM120_TMA_GROUPED_GEMMS" in module if sm == "120"
                                         else "-DCOMPILE_HOPPER_TMA_GROUPED_GEMMS" in module)
    extra = ["-DCUTE_SM90_EXTENDED_MMA_SHAPES_ENABLED"] if sm == "90" else []
    return _COMMON + extra + module + [f"-gencode=arch=compute_{gencode},code=sm_{gencode}"]


def _fi_includes(tree: ef.FlashinferTree) -> list[str]:
    nv = tree.root / "data" / "csrc" / "nv_internal"
    data = tree.root / "data"
    user = [nv, nv / "include", nv / "tensorrt_llm" / "cutlass_extensions" / "include",
            nv / "tensorrt_llm" / "kernels" / "cutlass_kernels" / "include", nv / "tensorrt_llm" / "kernels" / "cutlass_kernels"]
    system = [data / "include", data / "csrc", data / "cutlass" / "include", data / "cutlass" / "tools" / "util" / "include",
              data / "spdlog" / "include", HARNESS / "stubs"]  # stubs: cuBLAS headers, absent on this machine
    return ([f"-I{p}" for p in user] + [f"-I{p}" for p in tree.cccl_include_dirs]
            + [a for p in system for a in ("-isystem", str(p))])


def _params(args: str) -> dict:
    a = [x.strip() for x in args.replace("\n", " ").split(",")]
    return {"arch": a[0], "act": a[1], "weight": a[2], "out": a[3], "fusion": a[6],
            "cta": tuple(int(x) for x in a[7:10]), "cga": tuple(int(x) for x in a[10:13]),
            "mxfpx": a[13] == "true", "swap": a[16] == "true"}


@dataclass(frozen=True)
class _Variant:
    """One engine instantiation: FlashInfer's generator arguments and tileprobe's template arguments for it."""
    name: str
    sm: str  # the generator's arch ("120" builds SM120 and SM121, "90" Hopper)
    gencode: str  # what nvcc builds it for
    act: str
    weight: str
    fusion: str  # NONE (gemm1, default epilogue) or FINALIZE (gemm2)
    swap: bool
    cta: tuple[int, int, int]  # K in elements, as the generator spells it
    cga: tuple[int, int, int]
    tp_args: str  # FlashinferMoeKernel<...>


def _variants(tree: ef.FlashinferTree) -> list[_Variant]:
    """gemm1 and gemm2 of NVFP4 (each with swap off and on: finalize without swap is the tactic users' autotuners try
    and #4841 reports), MXFP8 x MXFP4 gemm1 and gemm2, one sm_121a build, one SM90 FP8 cluster 2x1. The sm_121a build
    (the SM120 module's sources and flags with DGX Spark's gencode) is in the plan of the sessions that draw sm_121a
    for the SM120 family (tests/_session_draw.py: sm120_archs, shared with the known-good files' re-probe), about
    every other run, and of every run with TILEPROBE_TEST_EVERY_ARCH=1: the other sessions hold one host pass fewer.
    NVFP4's gemm2 (FINALIZE) pair is the first tile the committed finalize-on blocklist blocks, without and with
    swap-AB, where that file exists (test_blocked_finalize_tiles_are_flashinfers_kernels checks the same two
    instantiations, so the session's one SM120 host pass holds them once instead of two more on the first tactic's
    tile: about 9 CPU s);
    else the first tactic's tile."""
    nv, mx = ef.sm120_tactics(0, tree)[0], ef.sm120_tactics(1, tree)[0]
    out = []
    for swap in (False, True):
        out.append(_Variant(f"nvfp4 NONE swap={swap}", "120", "120a", "SafeFP4", "SafeFP4", "NONE", swap,
                            (nv.tile_m, nv.tile_n, nv.k_elements(4)), (1, 1, 1),
                            f"{nv.tile_m}, {nv.tile_n}, {nv.k_bytes}, 0, 0, {int(swap)}, 120"))
    try:
        gone, stay = _blocked_finalize_variants(tree)
        out += [gone[0], stay[0]]
    except pytest.skip.Exception:  # no committed blocklist for this flashinfer: the first tactic's tile
        for swap in (False, True):
            out.append(_Variant(f"nvfp4 FINALIZE swap={swap}", "120", "120a", "SafeFP4", "SafeFP4", "FINALIZE", swap,
                                (nv.tile_m, nv.tile_n, nv.k_elements(4)), (1, 1, 1),
                                f"{nv.tile_m}, {nv.tile_n}, {nv.k_bytes}, 0, 1, {int(swap)}, 120"))
    for fusion, swap in (("NONE", False), ("FINALIZE", True)):
        out.append(_Variant(f"mxfp8xmxfp4 {fusion} swap={swap}", "120", "120a", "__nv_fp8_e4m3", "SafeFP4", fusion,
                            swap, (mx.tile_m, mx.tile_n, mx.k_elements(8)), (1, 1, 1),
                            f"{mx.tile_m}, {mx.tile_n}, {mx.k_bytes}, 1, {int(fusion == 'FINALIZE')}, {int(swap)}, 120"))
    if "sm_121a" in sm120_archs():  # its own host pass: only in the sessions that draw sm_121a (_session_draw)
        out.append(_Variant("nvfp4 FINALIZE swap=False sm_121a", "120", "121a", "SafeFP4", "SafeFP4", "FINALIZE",
                            False, (nv.tile_m, nv.tile_n, nv.k_elements(4)), (1, 1, 1),
                            f"{nv.tile_m}, {nv.tile_n}, {nv.k_bytes}, 0, 1, 0, 120"))
    out.append(_Variant("fp8 FINALIZE swap=True sm_90a cluster 2x1", "90", "90a", "__nv_fp8_e4m3", "__nv_fp8_e4m3",
                        "FINALIZE", True, (128, 64, 128), (2, 1, 1), "128, 64, 128, 2, 1, 1, 90, 2, 1"))
    return out


def _find(files: list[Path], v: _Variant) -> tuple[str, str]:
    """(header, instantiation block) of the generator's bf16-output instantiation matching the variant."""
    for f in files:
        text = f.read_text()
        for m in _INST.finditer(text):
            p = _params(m.group(1))
            if (p["act"], p["weight"], p["out"], p["fusion"], p["swap"], p["cta"], p["cga"]) == \
                    (v.act, v.weight, "__nv_bfloat16", v.fusion, v.swap, v.cta, v.cga):
                return text[:text.index("namespace tensorrt_llm")], m.group(0)
    raise AssertionError(f"flashinfer's generator has no instantiation for {v.name} {v.cta} {v.cga}")


_PTX_ENTRY = re.compile(r"^\s*(?:\.visible\s+)?\.entry\s+([A-Za-z_$][\w$]*)", re.M)


def _kernel_refs(obj: elf.Elf) -> dict[str, set[str]]:
    """Per section name: the kernel stubs its code or data points at."""
    refs: dict[str, set[str]] = {}
    for shndx, _, name in relocations(obj):
        if name.startswith(("_ZN7cutlass13device_kernel", "_Z12probe_kernel")):
            refs.setdefault(obj.sections[shndx].name, set()).add(name)
    return refs


def _launcher_ident(block: str) -> str:
    """FlashInfer's macro pastes its arguments into the launcher's name: `..._kernelLauncher_Sm120_SafeFP4_..._false`."""
    args = _INST.search(block).group(1)
    return "_".join(a.strip() for a in args.replace("\n", " ").split(","))


class _Identity:
    """The identity proof's shared state: FlashInfer's generated sources (one generator run per arch and worker), the
    session's plan (every variant any identity test checks), and every variant proven so far, so that none is
    compiled twice.

    The variants of one build (generator arch, gencode: the module flags) go into one translation unit: FlashInfer's
    generated instantiation blocks, verbatim, and one `void* tp_entry_<i> = &cutlass::device_kernel<
    tileprobe::FlashinferMoeKernel<...>::GemmKernel>` per variant. The TU gets nvcc's host pass with the module's own
    flags (`_nvcc_host.host_pass`). In the object, FlashInfer's launcher for a variant (its name is made from the generator's
    arguments, so it is found by them) references its kernel's stub; `tp_entry_<i>` holds the address of tileprobe's.
    The proof for the variant: both are the same symbol, and it is a `cutlass::device_kernel`. Two types that differed in
    anything would be two specialisations, two stubs, two names. Two TUs at a time (a host pass peaks at ~2 GiB).

    A build's TU holds every planned variant of that build, so the two tests that need the SM120 build share one host
    pass across the session's xdist workers: its (launcher, entry) symbols are kept in the session's build cache
    (TILEPROBE_TEST_CACHE/fi-identity/<sha256 of the TU text, the flags and nvcc's path>.json), written by the worker
    that compiled it (check, lock, check). A worker that finds the TU being compiled by the other waits for it: that
    costs no core, since the compiling test runs its builds two at a time, on both."""

    def __init__(self, tree: ef.FlashinferTree, nvcc: str, work: Path, plan: list[_Variant]):
        self.tree, self.nvcc, self.work = tree, nvcc, work
        self.files = {sm: _run_generator(tree.root, work / f"gen{sm}", sm) for sm in ("120", "90")}
        assert self.files["120"] and self.files["90"], "flashinfer's generator wrote no grouped SM120 / SM90 files"
        self.plan: dict[tuple[str, str], list[_Variant]] = {}
        for v in plan:
            key = replace(v, name="")
            group = self.plan.setdefault((v.sm, v.gencode), [])
            if key not in group:
                group.append(key)
        self.shared = Path(os.environ.get("TILEPROBE_TEST_CACHE") or work) / "fi-identity"
        self._done: dict[_Variant, tuple[set[str], set[str]]] = {}
        self.units, self.seconds = 0, 0.0

    def _source(self, sm: str, variants: list[_Variant]) -> tuple[str, list[str]]:
        headers, blocks, entries = [], [], []
        for i, v in enumerate(variants):
            header, block = _find(self.files[sm], v)
            headers += [] if header in headers else [header]
            blocks.append(block)
            entries.append(f"void* tp_entry_{i} = (void*)&cutlass::device_kernel<"
                           f"tileprobe::FlashinferMoeKernel<{v.tp_args}>::GemmKernel>;")
        text = ("".join(headers) + '#include "families/flashinfer_moe.cuh"\n'
                "namespace tensorrt_llm {\nnamespace kernels {\nnamespace cutlass_kernels_oss {\n"
                + "\n".join(blocks) + "\n}\n}\n}\n" + "\n".join(entries) + "\n")
        return text, blocks

    def _compile(self, build: tuple[str, str], variants: list[_Variant], text: str, blocks: list[str],
                 flags: list[str]) -> list[tuple[list[str], list[str]]]:
        sm, gencode = build
        src = self.work / f"identity_sm{sm}_{gencode}_{self.units}.cu"
        src.write_text(text)
        self.units += 1
        obj = host_pass(self.nvcc, flags, src)
        refs = _kernel_refs(obj)
        out = []
        for i, block in enumerate(blocks):
            ident = _launcher_ident(block)
            launchers = [name for name in refs if re.search(rf"\d+\w*Launcher_{re.escape(ident)}E", name)]
            assert len(launchers) == 1, f"FlashInfer's launcher for {ident} found {len(launchers)} times"
            out.append((sorted(refs[launchers[0]]), sorted(entry_target(obj, f"tp_entry_{i}"))))
        return out

    def _unit(self, build: tuple[str, str], needed: list[_Variant]) -> dict[_Variant, tuple[set[str], set[str]]]:
        sm, gencode = build
        planned = self.plan.get(build, [])
        variants = planned + [v for v in needed if v not in planned]
        flags = _module_flags(self.tree.root, sm, gencode) + _fi_includes(self.tree) + [f"-I{HARNESS}"]
        text, blocks = self._source(sm, variants)
        sha = hashlib.sha256("\0".join([text, *flags, self.nvcc]).encode()).hexdigest()[:24]
        self.shared.mkdir(parents=True, exist_ok=True)
        path = self.shared / f"{sha}.json"
        if not path.is_file():  # check, lock, check: the other worker may be compiling this very TU
            with FileLock(str(path) + ".lock"):
                if not path.is_file():
                    got = self._compile(build, variants, text, blocks, flags)
                    tmp = path.with_suffix(".tmp")
                    tmp.write_text(json.dumps({"variants": [v.tp_args for v in variants], "symbols": got}))
                    os.replace(tmp, path)
        got = json.loads(path.read_text())["symbols"]
        return {v: (set(a), set(b)) for v, (a, b) in zip(variants, got)}

    def check(self, variants: list[_Variant]) -> None:
        todo: dict[tuple[str, str], list[_Variant]] = {}
        for v in variants:
            key = replace(v, name="")  # the same instantiation under another label is not compiled again
            if key not in self._done and key not in todo.get((v.sm, v.gencode), []):
                todo.setdefault((v.sm, v.gencode), []).append(key)
        t0 = time.monotonic()
        with ThreadPoolExecutor(max_workers=2) as pool:
            for done in pool.map(lambda item: self._unit(*item), todo.items()):
                self._done.update(done)
        self.seconds += time.monotonic() - t0
        for v in variants:
            fi, tp = self._done[replace(v, name="")]
            assert len(fi) == 1 and len(tp) == 1, f"{v.name}: flashinfer's launcher refers to {sorted(fi)}, " \
                                                  f"tileprobe's entry to {sorted(tp)}"
            assert next(iter(tp)).startswith("_ZN7cutlass13device_kernel"), (v.name, tp)
            assert tp == fi, f"{v.name}: tileprobe's kernel differs from flashinfer's\n  fi {fi}\n  tp {tp}"
        print(f"identity: {len(variants)} variants checked; {self.units} host passes so far, {self.seconds:.0f} s")


@pytest.fixture(scope="session")
def identity(tmp_path_factory) -> _Identity:
    nvcc = shutil.which("nvcc")
    assert nvcc, "nvcc must be on PATH for these tests"
    tree = _installed()
    plan = _variants(tree)
    try:
        gone, stay = _blocked_finalize_variants(tree)
        plan += gone + stay
    except pytest.skip.Exception:  # no committed blocklist for this flashinfer: that test skips, saying so
        pass
    return _Identity(tree, nvcc, tmp_path_factory.mktemp("fi_identity"), plan)


_CROSS = """#include <cute/tensor.hpp>
namespace outer { namespace inner {
template <class Shape, int N, bool Swap> struct Kernel { using Tile = Shape; static constexpr int n = N; };
}}
template <class K> __global__ void probe_kernel(int* out) { out[0] = K::n + int(cute::size(typename K::Tile{})); }
using K0 = outer::inner::Kernel<cute::Shape<cute::_128, cute::Int<256>, cute::_64>, 3, true>;
using K1 = outer::inner::Kernel<cute::Shape<cute::_64, cute::_1>, -7, false>;
void* tp_entry_0 = (void*)&probe_kernel<K0>;
void* tp_entry_1 = (void*)&probe_kernel<K1>;
"""


@pytest.mark.nvcc
def test_host_pass_names_the_ptx_entry(tmp_path):
    """The identity proof reads kernel names from nvcc's host pass (`_nvcc_host.host_pass`): for template kernels over nested
    CuTe types, the host stub's symbol (internal linkage aside) is exactly the entry the full device pass emits."""
    tree = _installed()
    flags = _module_flags(tree.root, "120", "120a") + _fi_includes(tree)
    src = tmp_path / "cross.cu"
    src.write_text(_CROSS)
    obj = host_pass(shutil.which("nvcc"), flags, src)
    host = sorted(name for i in range(2) for name in entry_target(obj, f"tp_entry_{i}"))
    ptx = tmp_path / "cross.ptx"
    proc = subprocess.run([shutil.which("nvcc"), *flags, "-ptx", str(src), "-o", str(ptx)], capture_output=True,
                          text=True, timeout=NVCC_TIMEOUT_S)
    assert proc.returncode == 0, proc.stderr[-3000:]
    device = sorted(_PTX_ENTRY.findall(ptx.read_text()))
    assert len(device) == 2 and all(n.startswith("_Z12probe_kernelIN5outer5inner6Kernel") for n in device), device
    assert host == device


@pytest.mark.nvcc
def test_kernel_symbols_identical_to_flashinfer(identity):
    """Each variant's mangled kernel entry is the same from FlashInfer's generated instantiation and from tileprobe's
    FlashinferMoeKernel, compiled with the module's own flags (nvcc's host pass, one TU per build)."""
    identity.check(_variants(identity.tree))


BLOCKLISTS = Path(__file__).resolve().parents[2] / "results" / "blocklists"


def _blocked_finalize_variants(tree: ef.FlashinferTree) -> tuple[list[_Variant], list[_Variant]]:
    """The NVFP4 gemm2 finalize tactics the committed finalize-on blocklist blocks (read from the file, not restated
    here), and the swap-AB copies of the same tiles, which the same file lists as tactics and does not block."""
    version = ef.engine_label(tree.root).split()[-1]
    path = BLOCKLISTS / f"flashinfer-{version}" / "rtx-5090" / "nvidia-geforce-rtx-5090__nvfp4xnvfp4__finalize-on.json"
    if not path.is_file():
        pytest.skip(f"no committed blocklist for the installed flashinfer {version}: {path}")
    doc = json.loads(path.read_text())["tileprobe"]
    blocked = doc["blocked"]
    by_name = {t.name: t for t in ef.sm120_tactics(0, tree)}
    ids = {(g, name, epi, swap): i for i, g, name, epi, swap in doc["tactics"]}
    stay, gone = [], []
    for b in blocked:
        assert (b["gemm"], b["epilogue"], b["swap_ab"], b["dtypes"]) == ("gemm2", "finalize", False, "nvfp4xnvfp4"), b
        assert b["smem_bytes"] > b["smem_limit_bytes"] == 101376, b
        tile = by_name[b["tactic"]]  # a tactic of the engine's own SM120 list
        for swap, into in ((False, gone), (True, stay)):
            key = ("gemm2", b["tactic"], "finalize", swap)
            assert key in ids and (ids[key] in {x["id"] for x in blocked}) == (not swap), key
            into.append(_Variant(f"nvfp4 FINALIZE swap={swap} {tile.name} (ID {ids[key]})", "120", "120a", "SafeFP4",
                                 "SafeFP4", "FINALIZE", swap, (tile.tile_m, tile.tile_n, tile.k_elements(4)), (1, 1, 1),
                                 f"{tile.tile_m}, {tile.tile_n}, {tile.k_bytes}, 0, 1, {int(swap)}, 120"))
    return gone, stay


@pytest.mark.nvcc
def test_blocked_finalize_tiles_are_flashinfers_kernels(identity):
    """The blocklist's case rests on tileprobe sizing the kernel users' autotuners try: the two gemm2 finalize tiles
    it blocks (NVFP4, no swap-AB) and their swap-AB copies that it keeps must be, symbol for symbol, the kernels
    FlashInfer's generator instantiates for those tactics (one host pass of one TU with all four)."""
    gone, stay = _blocked_finalize_variants(identity.tree)
    assert len(gone) == len(stay) >= 2
    assert {v.cta[:2] for v in gone} == {(256, 128), (128, 256)}
    identity.check(gone + stay)
