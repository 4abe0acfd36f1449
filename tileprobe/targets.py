"""Devices and targets: real GPUs through cuda-python, and offline profiles for machines without one."""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import asdict, dataclass, replace

from tileprobe.errors import UsageError
from tileprobe.lazy import LazyModule

# cuda-python, loaded at the first device query (the import alone touches no device, but takes a while)
_cudart_module = LazyModule("cuda.bindings.runtime")


@dataclass(frozen=True)
class Target:
    name: str
    device_name: str
    cc: str  # "12.0"
    sms: int
    smem_per_sm: int  # bytes
    smem_optin: int  # cudaDevAttrMaxSharedMemoryPerBlockOptin, bytes
    regs_per_sm: int
    max_threads_per_sm: int
    l2_bytes: int
    peak_gbps: float
    source: str  # where the numbers come from
    gpu_index: int | None = None  # set for a real device
    driver: str = ""

    @property
    def arch(self) -> str:
        """The arch-specific nvcc target: sm_120a, sm_121a, sm_90a, sm_100a."""
        major, minor = self.cc.split(".")
        return f"sm_{major}{minor}a"

    @property
    def cc_int(self) -> int:
        major, minor = self.cc.split(".")
        return int(major) * 10 + int(minor)

    @property
    def is_device(self) -> bool:
        return self.gpu_index is not None

    def as_dict(self) -> dict:
        return asdict(self) | {"arch": self.arch}


KIB = 1024
# Offline profiles. opt-in = shared memory per SM - 1 KiB reserved by the driver per block.
PROFILES: dict[str, Target] = {
    t.name: t
    for t in (
        # CUTLASS arch.h sm120_smem_capacity_bytes = 101376; RTX Blackwell whitepaper (188 SMs, 1792 GB/s for the
        # Workstation Edition); device query in cutlass issue #2692.
        Target("rtx-pro-6000", "NVIDIA RTX PRO 6000 Blackwell", "12.0", 188, 100 * KIB, 101376, 65536, 1536,
               128 * 1024 * KIB, 1792.0, "CUTLASS arch.h; RTX Blackwell whitepaper; cutlass #2692"),
        # deviceQuery posted in nccl issue #1637: 170 SMs, 101376 B opt-in; 1792 GB/s GDDR7.
        Target("rtx-5090", "NVIDIA GeForce RTX 5090", "12.0", 170, 100 * KIB, 101376, 65536, 1536,
               96 * 1024 * KIB, 1792.0, "nccl #1637 deviceQuery; GeForce RTX 5090 spec"),
        # TensorRT-LLM issue #12141: all SM12x report 101,376; GB10 has 48 SMs and 273 GB/s LPDDR5x.
        Target("dgx-spark-gb10", "NVIDIA GB10", "12.1", 48, 100 * KIB, 101376, 65536, 1536,
               24 * 1024 * KIB, 273.0, "TensorRT-LLM #12141; DGX Spark spec"),
        # The other SM120 GPUs. Shared memory: TensorRT-LLM #12141 ("all SM12x report 101,376") and CUTLASS arch.h
        # sm120_smem_capacity_bytes; SMs = published CUDA cores / 128; L2 and DRAM bandwidth from NVIDIA's product
        # pages, not read from a device here (a real GPU's own values replace them, except the peak).
        Target("rtx-5080", "NVIDIA GeForce RTX 5080", "12.0", 84, 100 * KIB, 101376, 65536, 1536,
               64 * 1024 * KIB, 960.0, "TRT-LLM #12141 (SM12x opt-in); GeForce RTX 5080 spec (10752 cores, 960 GB/s)"),
        Target("rtx-5070-ti", "NVIDIA GeForce RTX 5070 Ti", "12.0", 70, 100 * KIB, 101376, 65536, 1536,
               48 * 1024 * KIB, 896.0, "TRT-LLM #12141 (SM12x opt-in); GeForce RTX 5070 Ti spec (8960 cores, "
                                       "896 GB/s; 8960 cores also in rigaya/NVEnc #675)"),
        Target("rtx-5070", "NVIDIA GeForce RTX 5070", "12.0", 48, 100 * KIB, 101376, 65536, 1536,
               48 * 1024 * KIB, 672.0, "TRT-LLM #12141 (SM12x opt-in); GeForce RTX 5070 spec (6144 cores, 672 GB/s)"),
        Target("rtx-5060-ti", "NVIDIA GeForce RTX 5060 Ti", "12.0", 36, 100 * KIB, 101376, 65536, 1536,
               32 * 1024 * KIB, 448.0, "TRT-LLM #12141 (SM12x opt-in); GeForce RTX 5060 Ti spec (4608 cores, "
                                       "448 GB/s)"),
        Target("rtx-pro-5000", "NVIDIA RTX PRO 5000 Blackwell", "12.0", 110, 100 * KIB, 101376, 65536, 1536,
               96 * 1024 * KIB, 1344.0, "TRT-LLM #12141 (SM12x opt-in); RTX PRO 5000 Blackwell spec (14080 cores, "
                                        "1344 GB/s; L2 not published here: GB202's 128 MiB cut, assumed 96 MiB)"),
        Target("rtx-pro-4500", "NVIDIA RTX PRO 4500 Blackwell", "12.0", 82, 100 * KIB, 101376, 65536, 1536,
               64 * 1024 * KIB, 896.0, "TRT-LLM #12141 (SM12x opt-in); RTX PRO 4500 Blackwell spec (10496 cores, "
                                       "896 GB/s)"),
        Target("rtx-pro-4000", "NVIDIA RTX PRO 4000 Blackwell", "12.0", 70, 100 * KIB, 101376, 65536, 1536,
               48 * 1024 * KIB, 672.0, "TRT-LLM #12141 (SM12x opt-in); RTX PRO 4000 Blackwell spec (8960 cores, "
                                       "672 GB/s)"),
        # CUTLASS sm100_smem_capacity_bytes = 232448; Blackwell tuning guide (228 KiB per SM).
        Target("b200", "NVIDIA B200", "10.0", 148, 228 * KIB, 232448, 65536, 2048,
               126 * 1024 * KIB, 7700.0, "CUTLASS arch.h sm100_smem_capacity_bytes; Blackwell tuning guide"),
        # CUTLASS sm90 builders sm90_smem_capacity_bytes = 232448; H100 SXM datasheet 3.35 TB/s.
        Target("h100", "NVIDIA H100 80GB HBM3", "9.0", 132, 228 * KIB, 232448, 65536, 2048,
               50 * 1024 * KIB, 3350.0, "CUTLASS sm90_common.inl; H100 SXM datasheet"),
        # Measured on this project's lent H200 (233472 B/SM, 232448 opt-in); 4.8 TB/s datasheet.
        Target("h200", "NVIDIA H200", "9.0", 132, 233472, 232448, 65536, 2048,
               60 * 1024 * KIB, 4800.0, "measured on the lent H200; H200 datasheet"),
        # Ada (sm_89): 100 KiB per SM, 101376 B opt-in, the same limit as SM120 (CuTeDSL SMEM_CAPACITY_MAP "sm_89");
        # RTX 4090: 128 SMs, 72 MiB L2, 1008 GB/s; L40S: 142 SMs, 96 MiB L2, 864 GB/s (product datasheets).
        Target("rtx-4090", "NVIDIA GeForce RTX 4090", "8.9", 128, 100 * KIB, 101376, 65536, 1536,
               72 * 1024 * KIB, 1008.0, "CuTeDSL SMEM_CAPACITY_MAP; GeForce RTX 4090 spec"),
        Target("l40s", "NVIDIA L40S", "8.9", 142, 100 * KIB, 101376, 65536, 1536,
               96 * 1024 * KIB, 864.0, "CuTeDSL SMEM_CAPACITY_MAP; L40S datasheet"),
    )
}

DEFAULT_OFFLINE_TARGET = "rtx-pro-6000"

# The exact name each SKU of a profile reports (cudaGetDeviceProperties().name, which torch.cuda.get_device_name
# returns and FlashInfer writes into a tactics blocklist's `gpu` metadata). One profile, several SKUs: the
# RTX PRO 6000 Blackwell ships as three editions with one GB202 configuration and one shared-memory limit.
DEVICE_NAMES: dict[str, tuple[str, ...]] = {
    "rtx-pro-6000": (
        # PyTorch's sm_120 warning quotes the device name: xorbitsai/inference #3866 (Workstation Edition);
        # NVIDIA/personaplex #2 and Netflix/void-model #16 (Server Edition, an AWS g7e instance).
        "NVIDIA RTX PRO 6000 Blackwell Workstation Edition",
        "NVIDIA RTX PRO 6000 Blackwell Server Edition",
        # NVIDIA driver README, supported-products table (device 2BB4); nvidia-smi output in public CI fixtures.
        "NVIDIA RTX PRO 6000 Blackwell Max-Q Workstation Edition",
    ),
    # PyTorch's sm_120 warning quotes it: xorbitsai/inference #3603, lllyasviel/Fooocus #3862.
    "rtx-5090": ("NVIDIA GeForce RTX 5090",),
    # nvidia-smi on a DGX Spark: NVIDIA/k8s-device-plugin #1482; gpustack/gpustack #3306.
    "dgx-spark-gb10": ("NVIDIA GB10",),
    # PyTorch's sm_120 warning quotes them: lllyasviel/FramePack #702, lllyasviel/stable-diffusion-webui-forge #2601.
    "rtx-5080": ("NVIDIA GeForce RTX 5080",),
    # PyTorch's warning: RVC-Project/Retrieval-based-Voice-Conversion-WebUI #2636, pytorch/pytorch #159847.
    "rtx-5070-ti": ("NVIDIA GeForce RTX 5070 Ti",),
    # nvidia-smi output in shkhln/libc6-shim #14.
    "rtx-5070": ("NVIDIA GeForce RTX 5070",),
    # PyTorch's warning: remsky/Kokoro-FastAPI #306, collabora/WhisperLive #396.
    "rtx-5060-ti": ("NVIDIA GeForce RTX 5060 Ti",),
    # RunPod's GPU type ids (the NVML names) and benchmark notes in public code, found by exact-string search;
    # NVIDIA/DCGM #312 names the product (device 2bb3, 48 and 72 GB versions).
    "rtx-pro-5000": ("NVIDIA RTX PRO 5000 Blackwell",),
    # RunPod's GPU type ids in public code; the Server Edition: an AWS g7.4xlarge node-group script in public code.
    "rtx-pro-4500": ("NVIDIA RTX PRO 4500 Blackwell", "NVIDIA RTX PRO 4500 Blackwell Server Edition"),
    # rigaya/NVEnc #751 (title); the SFF Edition: FlashML-org/FreeToken #277.
    "rtx-pro-4000": ("NVIDIA RTX PRO 4000 Blackwell", "NVIDIA RTX PRO 4000 Blackwell SFF Edition"),
    # The names below are the ones the serving engines' shipped Triton MoE config files were tuned under: each file
    # name is the engine's own spelling of the device name (vLLM's fused_moe/configs, SGLang's triton_utils/configs,
    # in the releases of tileprobe.engines.pins), e.g. device_name=NVIDIA_H100_80GB_HBM3, NVIDIA_H100_PCIe,
    # NVIDIA_H200_NVL.
    "h100": ("NVIDIA H100 80GB HBM3", "NVIDIA H100 PCIe", "NVIDIA H100"),
    "h200": ("NVIDIA H200", "NVIDIA H200 NVL"),
    "b200": ("NVIDIA B200",),
    "rtx-4090": ("NVIDIA GeForce RTX 4090",),
    "l40s": ("NVIDIA L40S",),
}
# Laptop parts (e.g. "NVIDIA GeForce RTX 5080 Laptop GPU") are sm_120 with the same limit but other SM counts and
# bandwidth: no profile here; pass their name with --gpu-name.


def device_names(name: str) -> tuple[str, ...]:
    """The exact device names the SKUs of profile `name` report; UsageError when tileprobe does not know them."""
    profile(name)
    names = DEVICE_NAMES.get(name)
    if not names:
        raise UsageError(f"no known device names for target {name!r} (known for: {', '.join(DEVICE_NAMES)}); "
                         "pass the name your GPU reports")
    return names


def arch_of_name(device_name: str) -> tuple[str, str] | None:
    """(profile, arch) of a device name tileprobe knows (a profile's SKU names and its own device name), else None."""
    for prof, t in PROFILES.items():
        if device_name == t.device_name or device_name in DEVICE_NAMES.get(prof, ()):
            return prof, t.arch
    return None


def profile(name: str) -> Target:
    try:
        return PROFILES[name]
    except KeyError:
        raise UsageError(f"unknown target {name!r}; known: {', '.join(PROFILES)}") from None


class NoDevice(Exception):
    """No GPU or no driver; `reason` says which."""


def _cudart():
    why = _cudart_module.missing()
    if why:  # missing or broken: every device query says so
        raise NoDevice(f"cuda-python unavailable: {why}")
    return _cudart_module


def _check(result):
    err, *values = result
    if int(err) != 0:
        raise NoDevice(f"CUDA runtime: {getattr(err, 'name', err)}")
    return values[0] if len(values) == 1 else values


def query_devices() -> list[Target]:
    """Every visible GPU as a Target, read through cuda-python. Raises NoDevice when there is none."""
    cudart = _cudart()
    count = _check(cudart.cudaGetDeviceCount())
    if count == 0:
        raise NoDevice("no CUDA device visible")
    A = cudart.cudaDeviceAttr
    driver = _check(cudart.cudaDriverGetVersion())
    out = []
    for i in range(count):
        def attr(a, i=i):
            return int(_check(cudart.cudaDeviceGetAttribute(a, i)))

        prop = _check(cudart.cudaGetDeviceProperties(i))
        name = prop.name.decode(errors="replace").rstrip("\x00") if isinstance(prop.name, bytes) else str(prop.name)
        clock_khz = attr(A.cudaDevAttrMemoryClockRate)
        bus_bits = attr(A.cudaDevAttrGlobalMemoryBusWidth)
        out.append(
            Target(
                name=f"gpu{i}",
                device_name=name,
                cc=f"{attr(A.cudaDevAttrComputeCapabilityMajor)}.{attr(A.cudaDevAttrComputeCapabilityMinor)}",
                sms=attr(A.cudaDevAttrMultiProcessorCount),
                smem_per_sm=attr(A.cudaDevAttrMaxSharedMemoryPerMultiprocessor),
                smem_optin=attr(A.cudaDevAttrMaxSharedMemoryPerBlockOptin),
                regs_per_sm=attr(A.cudaDevAttrMaxRegistersPerMultiprocessor),
                max_threads_per_sm=attr(A.cudaDevAttrMaxThreadsPerMultiProcessor),
                l2_bytes=attr(A.cudaDevAttrL2CacheSize),
                peak_gbps=2.0 * clock_khz * 1e3 * (bus_bits / 8) / 1e9,
                source="cuda-python device query",
                gpu_index=i,
                driver=_driver_version(f"{driver // 1000}.{(driver % 1000) // 10}"),
            )
        )
    return out


def child_visible_devices(gpu_index: int, environ: dict | None = None) -> str:
    """CUDA_VISIBLE_DEVICES for a child process that must run on device `gpu_index` of this process.

    gpu_index counts the devices this process sees; when CUDA_VISIBLE_DEVICES already narrows them (a Ray task with
    one GPU, a Slurm job with --gres, a container), device i is the i-th entry of that list, not physical device i:
    passing the bare index would send every such child to the first physical GPU."""
    env = os.environ if environ is None else environ
    outer = [d.strip() for d in (env.get("CUDA_VISIBLE_DEVICES") or "").split(",") if d.strip()]
    if outer and 0 <= gpu_index < len(outer):
        return outer[gpu_index]
    return str(gpu_index)


def _driver_version(cuda_api: str) -> str:
    """The kernel-mode driver release (e.g. 580.159.04) from nvidia-smi when it is there, with its CUDA API level."""
    smi = shutil.which("nvidia-smi")
    if smi:
        try:
            out = subprocess.run([smi, "--query-gpu=driver_version", "--format=csv,noheader"], capture_output=True,
                                 text=True, timeout=30).stdout.split()
            if out:
                return f"{out[0]} (CUDA {cuda_api})"
        except (OSError, subprocess.TimeoutExpired):
            pass
    return f"CUDA {cuda_api}"


def resolve_target(name: str | None, gpus: list[int] | None = None) -> tuple[Target, list[Target]]:
    """The target to judge against, and the devices to run on (empty when static only).

    A real device wins when present unless --target names a profile; then the devices are still returned when
    their compute capability matches the profile, so a runtime probe can confirm it. Devices always carry their
    own name ('h200', or 'gpu-sm120' when no profile matches the device's name): an RTX 5090 probed with
    --target rtx-pro-6000 files its runtime rows under rtx-5090, never under the profile it was compared with.
    """
    try:
        devices = query_devices()
    except NoDevice:
        devices = []
    if gpus is not None:
        by_index = {d.gpu_index: d for d in devices}
        missing = [g for g in gpus if g not in by_index]
        if missing:
            raise UsageError(f"--gpus names {missing}, but visible GPUs are {sorted(by_index) or 'none'}")
        devices = [by_index[g] for g in gpus]  # an index may repeat: several workers share that GPU
    devices = [_named(d) for d in devices]
    if name:
        target = profile(name)
        return target, [d for d in devices if d.cc == target.cc]
    if devices:
        return devices[0], devices
    return profile(DEFAULT_OFFLINE_TARGET), []


def _named(device: Target) -> Target:
    """A device under its own readable name; where a profile matches it, that profile's datasheet peak bandwidth
    replaces memory clock x bus width (which means nothing for unified LPDDR5X such as the DGX Spark's GB10)."""
    name = _profile_name_for(device)
    prof = PROFILES.get(name)
    if prof is not None:
        return replace(device, name=name, peak_gbps=prof.peak_gbps, source=f"{device.source}; peak from {prof.source}")
    return replace(device, name=name)


def _profile_name_for(device: Target) -> str:
    """A readable target name for a real device: 'h200' for an H200, else 'gpu-sm90' style. An exact SKU name wins,
    then the longest profile name the device's name contains ('RTX 5070 Ti' is not an 'RTX 5070')."""
    for p in PROFILES.values():
        if device.device_name in DEVICE_NAMES.get(p.name, ()) and p.cc == device.cc:
            return p.name
    hits = [p for p in PROFILES.values() if p.device_name.lower() in device.device_name.lower() and p.cc == device.cc]
    if hits:
        return max(hits, key=lambda p: len(p.device_name)).name
    return f"gpu-sm{device.cc.replace('.', '')}"
