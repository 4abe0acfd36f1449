"""tileprobe.backends.cutlass.bandwidth: the child-process path and its JSON without a GPU; the measurement itself on a GPU."""

import ctypes
import json
import math
import subprocess
import sys

import pytest

from tileprobe.backends.cutlass import bandwidth
from tileprobe.backends.cutlass import bandwidth_probe


def test_import_does_no_work():
    code = ("import sys, tileprobe.backends.cutlass.bandwidth; "
            "print(any(m.startswith('cuda') or m == 'torch' for m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.stdout.strip() == "False", out.stderr


def test_parse_output_takes_the_last_json_line():
    row = {"copy_gbps": 4100.5, "read_gbps": 4400.0, "l2_bytes": 52428800, "method": "m", "error": None}
    out = "some driver chatter\n" + json.dumps({"copy_gbps": 1}) + "\n" + json.dumps(row) + "\n"
    assert bandwidth.parse_output(out) == row


def test_parse_output_without_json_is_an_error_not_a_number():
    d = bandwidth.parse_output("not json\n{broken", "Traceback ...\nSegmentation fault", -11)
    assert d["copy_gbps"] is None and d["read_gbps"] is None
    assert "code -11" in d["error"] and "Segmentation fault" in d["error"]
    assert "no output" in bandwidth.parse_output("", "", 1)["error"]


def test_measure_reports_a_timeout(monkeypatch):
    def slow(*a, **k):
        raise subprocess.TimeoutExpired(a[0], k.get("timeout"))

    monkeypatch.setattr(bandwidth.subprocess, "run", slow)
    d = bandwidth.measure(0, timeout_s=7)
    assert d["copy_gbps"] is None and d["read_gbps"] is None and "timed out after 7 s" in d["error"]


def test_measure_calls_the_module_with_an_argument_list(monkeypatch):
    seen = {}

    def fake(cmd, **k):
        seen.update(cmd=cmd, **k)
        return subprocess.CompletedProcess(cmd, 0, json.dumps({"copy_gbps": 1.5, "read_gbps": 2.5, "error": None}), "")

    monkeypatch.setattr(bandwidth.subprocess, "run", fake)
    assert bandwidth.measure(3)["read_gbps"] == 2.5
    assert seen["cmd"] == [sys.executable, "-m", "tileprobe.backends.cutlass.bandwidth_probe", "--gpu", "3"] and seen["timeout"] > 0


def _has_gpu() -> bool:
    return bandwidth_probe.l2_bytes(0) is not None


@pytest.mark.skipif(_has_gpu(), reason="checks the path without a GPU")
def test_measure_without_a_gpu_returns_the_error_text():
    d = bandwidth.measure(0, timeout_s=120)
    assert d["copy_gbps"] is None and d["read_gbps"] is None
    assert isinstance(d["error"], str) and d["error"].strip()
    assert bandwidth_probe.l2_bytes(0) is None


def test_child_prints_one_json_line_even_on_failure():
    p = subprocess.run([sys.executable, "-m", "tileprobe.backends.cutlass.bandwidth_probe", "--gpu", "999"], capture_output=True,
                       text=True, timeout=120)
    lines = [ln for ln in p.stdout.splitlines() if ln.strip()]
    assert len(lines) == 1
    d = json.loads(lines[0])
    assert p.returncode == 1 and d["error"] and d["copy_gbps"] is None  # no GPU 999 anywhere


@pytest.mark.gpu
def test_measure_on_a_gpu():
    d = bandwidth.measure(0)
    assert d["error"] is None, d
    for k in ("copy_gbps", "read_gbps", "copy_gbps_best", "read_gbps_best"):
        assert isinstance(d[k], float) and math.isfinite(d[k]) and d[k] > 0, (k, d)
    assert d["copy_gbps_best"] >= d["copy_gbps"] and d["read_gbps_best"] >= d["read_gbps"]
    # Both stream HBM: a read-only kernel moves bytes at roughly the copy's rate (read + written), never 4x apart.
    assert 0.25 < d["read_gbps"] / d["copy_gbps"] < 4, d
    assert d["l2_bytes"] == bandwidth_probe.l2_bytes(0) and d["l2_bytes"] > 0
    assert d["buffer_bytes"] >= 8 * d["l2_bytes"], d  # the buffers do not fit in L2
    assert "cuMemcpyDtoDAsync" in d["method"] and "NVRTC" in d["method"]


class _Named(int):
    def __new__(cls, value, name):
        obj = int.__new__(cls, value)
        obj.name = name
        return obj


class _FakeDriver:
    """Just enough of cuda.bindings.driver for _measure_here's control flow and arithmetic, with no GPU."""

    class CUresult(int):
        pass

    class CUdevice_attribute:  # noqa: N801 - the name cuda-python uses
        def __getattr__(self, name):
            return _Named(0, name)

    CUdevice_attribute = CUdevice_attribute()
    ATTRS = {"CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR": 9, "CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR": 0,
             "CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE": 52428800, "CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT": 132,
             "CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR": 2048}

    def __init__(self, fail=()):
        self.fail, self.calls, self.launch_args, self.next_ptr = set(fail), [], None, 0x7F0000000000

    def __getattr__(self, name):
        if name.startswith("_"):
            raise AttributeError(name)

        def call(*args):
            self.calls.append(name)
            if name in self.fail:
                return (_Named(700, "CUDA_ERROR_ILLEGAL_ADDRESS"),)
            return getattr(self, "_" + name, lambda *a: (0,))(*args)
        return call

    def _cuDeviceGet(self, i):
        return 0, i

    def _cuDeviceGetAttribute(self, a, dev):
        return 0, self.ATTRS[a.name]

    def _cuDeviceGetName(self, n, dev):
        return 0, b"Fake H200\0\0\0"

    def _cuDevicePrimaryCtxRetain(self, dev):
        return 0, "ctx"

    def _cuMemGetInfo(self):
        return 0, 140 * 1024**3, 141 * 1024**3

    def _cuMemAlloc(self, n):
        self.next_ptr += 1 << 32
        return 0, self.next_ptr

    def _cuEventCreate(self, flags):
        return 0, object()

    def _cuEventElapsedTime(self, a, b):
        return 0, 10 * 0.5  # 10 calls of 0.5 ms

    def _cuModuleLoadData(self, image):
        return 0, "module"

    def _cuModuleGetFunction(self, module, name):
        return 0, "func"

    def _cuLaunchKernel(self, *args):
        params = args[9]
        assert isinstance(params, int)  # a void** the driver copies the three arguments from
        ptrs = (ctypes.c_void_p * 3).from_address(params)
        self.launch_args = [ctypes.c_uint64.from_address(p).value for p in ptrs]
        return (0,)


def _run_fake(monkeypatch, fake):
    monkeypatch.setattr(bandwidth_probe, "driver", fake)
    monkeypatch.setattr(bandwidth_probe, "_compile_read_kernel", lambda cc: (b"cubin", f"NVRTC fake sm_{cc[0]}{cc[1]}"))
    return bandwidth_probe._measure_here(0)


def test_measure_here_with_a_fake_driver(monkeypatch):
    fake = _FakeDriver()
    d = _run_fake(monkeypatch, fake)
    assert d["error"] is None, d
    gib = 1024**3
    assert d["buffer_bytes"] == gib and d["l2_bytes"] == 52428800 and d["cc"] == "9.0"
    assert d["device_name"] == "Fake H200"
    assert d["copy_gbps"] == round(2 * gib / 0.5e-3 / 1e9, 1) and d["read_gbps"] == round(gib / 0.5e-3 / 1e9, 1)
    src, n, dst = fake.launch_args
    assert n == gib // 16 and src != dst and src > 0 and dst > 0
    assert "cuMemcpyDtoDAsync" in d["method"] and "NVRTC fake sm_90" in d["method"] and "1056x256" in d["method"]
    assert fake.calls.count("cuMemFree") == 2 and fake.calls[-1] == "cuDevicePrimaryCtxRelease"


def test_measure_here_keeps_the_copy_when_the_read_kernel_fails(monkeypatch):
    d = _run_fake(monkeypatch, _FakeDriver(fail={"cuModuleLoadData"}))
    assert d["copy_gbps"] > 0 and d["read_gbps"] is None
    assert d["error"].startswith("read: cuModuleLoadData: CUDA_ERROR_ILLEGAL_ADDRESS"), d["error"]


def test_nvrtc_compiles_the_read_kernel():
    try:
        from cuda.bindings import nvrtc

        nvrtc.nvrtcVersion()
    except Exception as exc:  # noqa: BLE001
        pytest.skip(f"no NVRTC here: {exc}")
    for cc in ((9, 0), (12, 0)):
        image, how = bandwidth_probe._compile_read_kernel(cc)
        assert image[:4] == b"\x7fELF" and f"cubin sm_{cc[0]}{cc[1]}" in how
