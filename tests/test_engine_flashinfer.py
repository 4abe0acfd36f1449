"""flashinfer-moe: the engine reader (plain unit tests) and the identity proof (nvcc).

The identity proof runs FlashInfer's own kernel generator from the installed package (without importing flashinfer),
compiles one gemm1 (default epilogue) and one gemm2 (finalize) instantiation for SM120 exactly as FlashInfer's JIT
does, compiles tileprobe's FlashinferMoeKernel for the same tactics, and compares the mangled kernel entry names.
"""

from __future__ import annotations

import importlib.util
import re
import shutil
import subprocess
import sys
import time
import types
from pathlib import Path

import pytest

from tileprobe import engine_flashinfer as ef
from tileprobe.errors import UsageError

HARNESS = Path(__file__).resolve().parent.parent / "cutlass_harness"


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
_ENTRY = re.compile(r"^\s*(?:\.visible\s+)?\.entry\s+([A-Za-z_$][\w$]*)", re.M)


def _run_generator(fi_root: Path, out: Path) -> list[Path]:
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
        # As gen_cutlass_fused_moe_module does for the SM120 module: generate_gemm_operations(dir, "120;120-real").
        mod.generate_gemm_operations(str(out), "120;120-real")
    finally:
        for name in [n for n in sys.modules if n.startswith(pkg_name)]:
            del sys.modules[name]
    assert "flashinfer" not in sys.modules or True  # (flashinfer may be imported by others; we never import it)
    return sorted(out.rglob("*sm120*.generated.cu"))


def _sm120_module_flags(fi_root: Path) -> list[str]:
    """The -D flags gen_cutlass_fused_moe_sm120_module passes, read from jit/fused_moe.py, plus what FlashInfer's
    JIT adds to every CUDA source (jit/core.py gen_jit_spec, jit/cpp_ext.py build_cuda_cflags)."""
    src = (fi_root / ef.JIT_FUSED_MOE).read_text()
    m = re.search(r"def gen_cutlass_fused_moe_sm120_module\(.*?\n(.*?)\n(?:def |\Z)", src, re.S)
    assert m, "gen_cutlass_fused_moe_sm120_module not found"
    module = re.findall(r'"(-D[A-Za-z0-9_=]+)"', m.group(1))
    assert "-DCOMPILE_BLACKWELL_SM120_TMA_GROUPED_GEMMS" in module and "-DENABLE_FP4" in module
    common = ["-std=c++17", "-use_fast_math", "-DFLASHINFER_ENABLE_F16", "-DFLASHINFER_ENABLE_BF16",
              "-DFLASHINFER_ENABLE_FP8_E4M3", "-DFLASHINFER_ENABLE_FP8_E5M2", "-DNDEBUG", "-O3",
              "--expt-relaxed-constexpr", "-static-global-template-stub=false",
              "-DFLASHINFER_ENABLE_FP8_E8M0", "-DFLASHINFER_ENABLE_FP4_E2M1"]
    return common + module + ["-gencode=arch=compute_120a,code=sm_120a"]


def _fi_includes(tree: ef.FlashinferTree) -> list[str]:
    nv = tree.root / "data" / "csrc" / "nv_internal"
    data = tree.root / "data"
    user = [nv, nv / "include", nv / "tensorrt_llm" / "cutlass_extensions" / "include",
            nv / "tensorrt_llm" / "kernels" / "cutlass_kernels" / "include", nv / "tensorrt_llm" / "kernels" / "cutlass_kernels"]
    system = [data / "include", data / "csrc", data / "cutlass" / "include", data / "cutlass" / "tools" / "util" / "include",
              data / "spdlog" / "include", HARNESS / "stubs"]  # stubs: cuBLAS headers, absent on this machine
    return ([f"-I{p}" for p in user] + [f"-I{p}" for p in tree.cccl_include_dirs]
            + [a for p in system for a in ("-isystem", str(p))])


def _entries(nvcc: str, flags: list[str], src: Path) -> list[str]:
    ptx = src.with_suffix(".ptx")
    proc = subprocess.run([nvcc, *flags, "-ptx", str(src), "-o", str(ptx)], capture_output=True, text=True)
    assert proc.returncode == 0, f"nvcc failed on {src.name}:\n{proc.stderr[-4000:]}"
    return sorted(_ENTRY.findall(ptx.read_text()))


def _params(args: str) -> dict:
    a = [x.strip() for x in args.replace("\n", " ").split(",")]
    return {"arch": a[0], "act": a[1], "weight": a[2], "out": a[3], "fusion": a[6],
            "cta": tuple(int(x) for x in a[7:10]), "cga": tuple(int(x) for x in a[10:13]),
            "mxfpx": a[13] == "true", "swap": a[16] == "true"}


@pytest.mark.nvcc
def test_kernel_symbols_identical_to_flashinfer(tmp_path, nvcc_path):
    tree = _installed()
    t0 = time.monotonic()
    files = _run_generator(tree.root, tmp_path / "gen")
    assert files, "flashinfer's generator wrote no SM120 files"
    # The tactic: the first NVFP4 candidate the engine keeps for grouped GEMM, in the CUTLASS K elements the
    # generator spells (K bytes * 8 / 4 bits).
    tactic = ef.sm120_tactics(0, tree)[0]
    cta = (tactic.tile_m, tactic.tile_n, tactic.k_elements(4))
    chosen: dict[str, tuple[str, str, dict]] = {}
    for f in files:
        text = f.read_text()
        header = text[:text.index("namespace tensorrt_llm")]
        for m in _INST.finditer(text):
            p = _params(m.group(1))
            if (p["act"], p["weight"], p["out"], p["cta"], p["cga"]) != ("SafeFP4", "SafeFP4", "__nv_bfloat16", cta,
                                                                          (1, 1, 1)):
                continue
            key = {("NONE", False): "gemm1", ("FINALIZE", True): "gemm2"}.get((p["fusion"], p["swap"]))
            if key and key not in chosen:
                chosen[key] = (header, m.group(0), p)
    assert set(chosen) == {"gemm1", "gemm2"}, f"generator lacks {tactic.name} NVFP4 instantiations"
    headers = {h for h, _, _ in chosen.values()}
    assert len(headers) == 1
    fi_src = tmp_path / "flashinfer_side.cu"
    fi_src.write_text(headers.pop() + "namespace tensorrt_llm {\nnamespace kernels {\nnamespace cutlass_kernels_oss {\n"
                      + "\n".join(block for _, block, _ in chosen.values()) + "\n}\n}\n}\n")
    tp_src = tmp_path / "tileprobe_side.cu"
    lines = ['#include "families/flashinfer_moe.cuh"']
    for i, (_, _, p) in enumerate(chosen.values()):
        targs = (f"{tactic.tile_m}, {tactic.tile_n}, {tactic.k_bytes}, 0, {int(p['fusion'] == 'FINALIZE')}, "
                 f"{int(p['swap'])}, 120")
        lines.append(f"void* tp_entry{i} = (void*)&cutlass::device_kernel<"
                     f"tileprobe::FlashinferMoeKernel<{targs}>::GemmKernel>;")
    tp_src.write_text("\n".join(lines) + "\n")

    flags = _sm120_module_flags(tree.root) + _fi_includes(tree)
    fi_entries = _entries(nvcc_path, flags, fi_src)
    tp_entries = _entries(nvcc_path, flags + [f"-I{HARNESS}"], tp_src)
    print(f"{tactic.name}: {len(fi_entries)} flashinfer entries, {time.monotonic() - t0:.0f} s")
    assert len(fi_entries) == 2 and all(e.startswith("_ZN7cutlass13device_kernel") for e in fi_entries)
    assert tp_entries == fi_entries
