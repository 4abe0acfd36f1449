"""`tileprobe inspect`: what it reads from a binary equals what ptxas itself reports for the same build (`-Xptxas -v`:
registers, bytes smem, stack frame), per kernel and arch, for kernels whose sizes are drawn at random per run; the
targets a binary runs on; the row-in-shared-memory example solved per target; bad input is one line, exit 2."""

import json
import random
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tileprobe.binary import cubin, elf
from tileprobe.binary.inspect import runs_on
from tileprobe.guard import include_dir
from tileprobe.targets import PROFILES

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "row_in_smem.cu"
ARCHS = ("sm_80", "sm_90a", "sm_100a", "sm_120a", "sm_121a")


def tileprobe(*args):
    return subprocess.run([sys.executable, "-m", "tileprobe", *args], capture_output=True, text=True, timeout=300)


def gencode(arch: str) -> list[str]:
    return ["-gencode", f"arch={arch.replace('sm_', 'compute_')},code={arch}"]


def nvcc(nvcc_path, *args, cwd=None) -> str:
    p = subprocess.run([nvcc_path, *args], capture_output=True, text=True, timeout=900, cwd=cwd)
    assert p.returncode == 0, p.stderr[-3000:]
    return p.stdout + p.stderr


def ptxas_report(log: str) -> dict[tuple[str, str], dict]:
    """(mangled name, arch) -> registers, smem, stack, spill stores, as ptxas -v printed them."""
    out, cur = {}, None
    for line in log.splitlines():
        m = re.search(r"Compiling entry function '(\S+)' for '(\S+)'", line)
        if m:
            cur = out.setdefault((m.group(1), m.group(2)), {"smem": 0})
            continue
        if cur is None:
            continue
        m = re.search(r"(\d+) bytes stack frame, (\d+) bytes spill stores", line)
        if m:
            cur["stack"], cur["spill"] = int(m.group(1)), int(m.group(2))
        m = re.search(r"Used (\d+) registers", line)
        if m:
            cur["regs"] = int(m.group(1))
        m = re.search(r"(\d+) bytes smem", line)
        if m:
            cur["smem"] = int(m.group(1))
    return out


def kernels_source(rng) -> tuple[str, dict]:
    """Kernels with static arrays of random sizes, a random launch bound, a register cap that forces spills, and a
    local array indexed at run time (stack frame)."""
    # "local" >= 128: for a short array nvcc 13.0 unrolls the fill loop and loads only the indexed element, so there
    # is no stack frame at all (measured: 0 B for 14, 24, 40 and 64 elements on sm_80..sm_121a; 400 B for 100), and
    # on sm_120a / sm_121a even the volatile array stays in registers up to 121 elements (0 B at 100..121, 496 B at
    # 124; sm_80..sm_100a: 400 B at 100): a -n 3 run drew one of those sizes.
    sizes = {"a": rng.randrange(1, 48 * 1024), "b": rng.randrange(1, 12000) * 4, "local": rng.randrange(128, 256)}
    bound = rng.choice([64, 128, 192, 256, 384, 512])
    src = f"""
extern "C" __global__ void __launch_bounds__({bound}) static_a(char* out, int n) {{
  __shared__ char buf[{sizes['a']}];
  for (int i = threadIdx.x; i < {sizes['a']}; i += blockDim.x) buf[i] = (char)(i * n);
  __syncthreads();
  out[threadIdx.x] = buf[(threadIdx.x * 7 + n) % {sizes['a']}];
}}
namespace ns {{
template <int N> __global__ void static_b(float* out, int n) {{
  __shared__ float b1[N / 4];
  __shared__ double b2[3];
  extern __shared__ float dyn[];
  b1[threadIdx.x % (N / 4)] = n; b2[threadIdx.x % 3] = n; dyn[threadIdx.x] = n;
  __syncthreads();
  out[threadIdx.x] = b1[(threadIdx.x + 1) % (N / 4)] + (float)b2[n % 3] + dyn[n % 32];
}}
template __global__ void static_b<{sizes['b']}>(float*, int);
}}
__global__ void local_array(float* out, const int* idx, int n) {{
  volatile float a[{sizes['local']}];  // volatile: kept in local memory (a stack frame) at any size
  for (int i = 0; i < {sizes['local']}; ++i) a[i] = out[i * n + threadIdx.x];
  out[threadIdx.x] = a[idx[threadIdx.x] % {sizes['local']}];
}}
__global__ void __maxnreg__(32) spilly(double* out, const double* in, int n) {{
  double acc[24];
  for (int i = 0; i < 24; ++i) acc[i] = in[i * n + threadIdx.x];
  for (int r = 0; r < n; ++r)
    for (int i = 0; i < 24; ++i) acc[i] = acc[i] * acc[(i + r) % 24] + in[(r * 24 + i) % n];
  double s = 0; for (int i = 0; i < 24; ++i) s += acc[i] * i;
  out[threadIdx.x] = s;
}}
__global__ void no_smem(int* out) {{ out[threadIdx.x] = threadIdx.x; }}
"""
    return src, {"sizes": sizes, "bound": bound}


@pytest.fixture(scope="module")
def built(tmp_path_factory, rng_module):
    """Per arch a cubin with ptxas -v's log, plus one object file holding every arch. One nvcc run makes the
    object and, kept (--keep), the cubin ptxas wrote for each arch: byte for byte what `nvcc -cubin` for that arch
    alone writes (nvcc 13.0), so the per-arch cubins cost no compile of their own; its -Xptxas -v log names the arch
    of each entry. The object's host code is position-independent, so the shared library is that object linked."""
    path = shutil.which("nvcc")
    assert path, "nvcc must be on PATH for these tests"
    d = tmp_path_factory.mktemp("inspect")
    src, meta = kernels_source(rng_module)
    (d / "k.cu").write_text(src)
    allcode = [a for arch in ARCHS for a in gencode(arch)]
    keep = d / "keep"
    keep.mkdir()
    logs = ptxas_report(nvcc(path, "-c", "-o", str(d / "k.o"), str(d / "k.cu"), *allcode, "-Xcompiler", "-fPIC",
                             "-Xptxas", "-v", "--keep", "--keep-dir", str(keep)))
    for kept in keep.glob("*.cubin"):
        (image,) = elf.images_in(kept)
        shutil.copyfile(kept, d / f"{image.arch}.cubin")
    assert sorted(p.stem for p in d.glob("sm_*.cubin")) == sorted(ARCHS)
    assert {arch for _, arch in logs} == set(ARCHS)
    nvcc(path, "-c", "-o", str(d / "k_lz4.o"), str(d / "k.cu"), *allcode, "--compress-mode=speed", "-Xfatbin",
         "-compress-all")
    nvcc(path, "-c", "-o", str(d / "k_zstd.o"), str(d / "k.cu"), *allcode, "--compress-mode=size", "-Xfatbin",
         "-compress-all")
    nvcc(path, "-fatbin", "-o", str(d / "k.fatbin"), str(d / "k.cu"), *allcode)
    nvcc(path, "-shared", "-o", str(d / "libk.so"), str(d / "k.o"))
    nvcc(path, "-c", "-o", str(d / "ptx.o"), str(d / "k.cu"), "-gencode", "arch=compute_90,code=compute_90",
         "--compress-mode=speed")
    return d, logs, meta, path


@pytest.fixture(scope="module")
def rng_module():
    seed = random.randrange(2**32)
    print(f"random seed {seed}")
    return random.Random(seed)


@pytest.mark.nvcc
def test_every_kernel_matches_ptxas_on_every_arch(built):
    d, logs, meta, _ = built
    seen = 0
    for arch in ARCHS:
        images = elf.images_in(d / f"{arch}.cubin")
        assert [im.arch for im in images] == [arch]
        for k in cubin.kernels(images[0]):
            want = logs[(k.name, arch)]
            assert (k.static_smem, k.registers, k.stack_frame) == (want["smem"], want["regs"], want["stack"]), \
                (k.demangled, arch, want)
            seen += 1
        by = {k.demangled: k for k in cubin.kernels(images[0])}
        assert by["static_a"].max_threads == meta["bound"] and by["static_a"].launch_bounds == (meta["bound"], 1, 1)
        assert f"void ns::static_b<{meta['sizes']['b']}>(float*, int)" in by, sorted(by)
        assert by["static_a"].static_smem >= meta["sizes"]["a"]
        if arch != "sm_80":  # from sm_90 on the section holds the 1 KiB reserve too (what cuobjdump shows as SHARED)
            assert by["no_smem(int*)"].smem_section == 1024 and by["no_smem(int*)"].static_smem == 0
    assert seen == 5 * len(ARCHS)
    assert any(v["spill"] > 0 for v in logs.values()), "the register cap should force spills"
    assert all(v["stack"] > 0 for (n, _), v in logs.items() if "local_array" in n)


@pytest.mark.nvcc
def test_objects_fatbins_and_shared_libraries_hold_the_same_kernels(built):
    d, logs, _, _ = built
    for name in ("k.o", "k_lz4.o", "k_zstd.o", "k.fatbin", "libk.so"):
        images = [im for im in elf.images_in(d / name) if im.kind == "cubin" and cubin.kernels(im)]
        assert sorted(im.arch for im in images) == sorted(ARCHS), name  # (linked files add kernel-less cubins)
        for im in images:
            for k in cubin.kernels(im):
                want = logs[(k.name, im.arch)]
                assert (k.static_smem, k.registers) == (want["smem"], want["regs"]), (name, k.demangled, im.arch)


@pytest.mark.nvcc
def test_cli_reports_per_target_with_kernel_filter(built):
    d, logs, meta, _ = built
    p = tileprobe("inspect", str(d / "k.o"), "--kernel", r"static_b<\d+>", "--json")
    assert p.returncode == 0, p.stderr
    report = json.loads(p.stdout)
    assert {k["demangled"] for k in report["kernels"]} == {f"void ns::static_b<{meta['sizes']['b']}>(float*, int)"}
    for t in report["targets"]:
        (a,) = t["kernels"]
        profile = PROFILES.get(t["target"])
        arch = {"12.0": "sm_120a", "12.1": "sm_121a", "10.0": "sm_100a", "9.0": "sm_90a", "8.9": "sm_80"}[t["cc"]]
        want = logs[(report["kernels"][0]["name"], arch)]["smem"]
        assert a["runs"] and a["static_smem"] == want
        assert a["max_dynamic"] == (profile.smem_optin if profile else t["smem_optin"]) - want


@pytest.mark.nvcc
def test_ptx_only_kernels_are_named_and_compiled_at_load(built):
    """A PTX-only object: the kernels are named from the PTX; --no-jit says the bytes are not in the binary; by
    default the PTX is compiled here for each target (what the driver does at load), giving ptxas's own bytes."""
    d, logs = built[0], built[1]
    p = tileprobe("inspect", str(d / "ptx.o"), "--kernel", "static_a", "--target", "h200,b200", "--no-jit")
    assert p.returncode == 0, p.stderr
    assert "PTX only" in p.stdout and p.stdout.count("runs: static_a: PTX compute_90 only: compiled for") == 2, p.stdout
    p = tileprobe("inspect", str(d / "ptx.o"), "--kernel", "static_a", "--target", "rtx-pro-6000,h200", "--json")
    assert p.returncode == 0, p.stderr
    for t, arch in zip(json.loads(p.stdout)["targets"], ("sm_120a", "sm_90a")):
        (a,) = t["kernels"]
        assert a["static_smem"] == logs[("static_a", arch)]["smem"], a
        assert "compiled here for sm_" in a["code"] and "by ptxas" in a["code"], a


def test_which_code_runs_where():
    assert runs_on("cubin", 120, "a", 120) and not runs_on("cubin", 120, "a", 121)  # sm_120a is not sm_121
    assert not runs_on("cubin", 90, "a", 120) and not runs_on("cubin", 90, "", 120)  # Hopper code on SM120
    assert runs_on("cubin", 120, "", 121) and runs_on("cubin", 120, "f", 121) and not runs_on("cubin", 121, "", 120)
    assert runs_on("ptx", 90, "", 120) and not runs_on("ptx", 90, "a", 120) and not runs_on("ptx", 121, "", 120)
    assert not runs_on("cubin", 100, "f", 120)


@pytest.mark.nvcc
def test_arch_specific_code_does_not_run_on_the_sibling(built, tmp_path):
    d, _, _, path = built
    nvcc(path, "-c", "-o", str(tmp_path / "a.o"), str(d / "k.cu"), *gencode("sm_120a"))
    p = tileprobe("inspect", str(tmp_path / "a.o"), "--kernel", "no_smem", "--target", "dgx-spark-gb10,rtx-5090,h200")
    assert p.returncode == 0, p.stderr
    text = p.stdout
    assert re.search(r"dgx-spark-gb10 .*\n  DOES NOT RUN: no_smem\(int\*\): no code for compute capability 12.1", text)
    assert re.search(r"rtx-5090 .*\n  runs: no_smem\(int\*\): sm_120a cubin", text)
    assert re.search(r"h200 .*\n  DOES NOT RUN", text)


@pytest.mark.nvcc
def test_row_in_shared_memory_example_solved_per_target(tmp_path, nvcc_path, rng):
    """The README's example: built with the C++ guard header, inspected, kv_len solved per target; the bound is the
    largest kv_len whose (Dl + Dr + kv_len) * 4 bytes plus ptxas's static bytes fit each target's opt-in."""
    exe = tmp_path / "row_in_smem"
    log = nvcc(nvcc_path, "-O2", f"-I{include_dir()}", *gencode("sm_120a"), *gencode("sm_121a"), *gencode("sm_90a"),
               "-Xptxas", "-v", "-o", str(exe), str(EXAMPLE))
    static = {arch: v["smem"] for (name, arch), v in ptxas_report(log).items() if name == "row_attention"}
    assert set(static) == {"sm_120a", "sm_121a", "sm_90a"}
    dl, dr = rng.choice([512, 256, 128]), rng.choice([64, 32, 0])
    p = tileprobe("inspect", str(exe), "--kernel", "row_attention", "--dynamic", "(Dl+Dr+kv_len)*4", "--set",
                  f"Dl={dl},Dr={dr}", "--solve", "kv_len", "--json")
    assert p.returncode == 0, p.stderr
    for t in json.loads(p.stdout)["targets"]:
        (a,) = t["kernels"]
        if t["cc"] in ("10.0", "8.9"):  # no sm_100 or sm_8x code in this build
            assert not a["runs"]
            continue
        st = static[{"12.0": "sm_120a", "12.1": "sm_121a", "9.0": "sm_90a"}[t["cc"]]]
        v = a["solved"]["value"]
        assert (dl + dr + v) * 4 + st <= t["smem_optin"] < (dl + dr + v + 1) * 4 + st, (t["target"], v)
    # the committed output (results/guard/row_in_smem/inspect.txt, quoted in the README) is what this build says
    committed = (ROOT / "results" / "guard" / "row_in_smem" / "inspect.txt").read_text()
    p = tileprobe("inspect", str(exe), "--kernel", "row_attention", "--dynamic", "(Dl+Dr+kv_len)*4", "--set",
                  "Dl=512,Dr=64", "--solve", "kv_len")
    assert p.returncode == 0, p.stderr
    fresh = [line for line in p.stdout.splitlines() if "largest" in line or "DOES NOT RUN" in line]
    assert fresh and all(line in committed for line in fresh), fresh


@pytest.mark.parametrize("args,needle", [
    (["inspect", "/nonexistent/x.cubin"], "cannot read"),
    (["inspect", __file__], "no CUDA device code"),
    (["inspect", sys.executable], "no CUDA device code"),
    (["inspect", __file__, "--set", "a=1"], "--set and --solve apply with --dynamic only"),
    (["inspect", __file__, "--dynamic", "(Dl+4"], "missing ')'"),
    (["inspect", __file__, "--dynamic", "Dl**2"], "unexpected '*'"),
    (["inspect", __file__, "--dynamic", "__import__('os')"], "unexpected"),
    (["inspect", __file__, "--dynamic", "Dl*4", "--set", "Dl=x"], "expected NAME=INTEGER"),
    (["inspect", __file__, "--dynamic", "Dl*4", "--set", "Dl=-512"], "not negative"),
    (["inspect", __file__, "--dynamic", "Dl*4"], "Dl has no value"),
    (["inspect", __file__, "--dynamic", "4/(Dl-Dl)", "--set", "Dl=3"], "division by zero"),
    (["inspect", __file__, "--dynamic", "Dl*4", "--solve", "kv"], "kv is not in the expression"),
])
def test_bad_input_is_one_line_and_exit_2(args, needle):
    p = tileprobe(*args)
    assert p.returncode == 2, p.stdout + p.stderr
    assert "Traceback" not in p.stderr + p.stdout
    lines = [l for l in p.stderr.splitlines() if l.strip()]
    assert len(lines) == 1 and needle in lines[0], p.stderr


@pytest.mark.nvcc
def test_bad_kernel_regex_and_no_match(built):
    d = built[0]
    for pattern, needle in (("(", "not a regular expression"), ("nothing_like_this", "matches none")):
        p = tileprobe("inspect", str(d / "k.o"), "--kernel", pattern)
        assert p.returncode == 2 and needle in p.stderr and "Traceback" not in p.stderr, p.stderr
