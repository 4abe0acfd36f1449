"""SGLang as a Triton fused-MoE engine: its kernel file, its shipped config tree, and which config it loads.

The lookup below is tileprobe's own statement of the rule of SGLang's pin-table release (tileprobe.engines.pins)
(`sglang/srt/layers/moe/moe_runner/triton_utils/fused_moe_triton_config.py`: get_config_file_name, get_moe_configs,
get_default_config, try_get_optimal_moe_config with return_down_config=True, as fused_experts calls it; on CUDA,
deterministic inference off); tests/engines/test_triton_engine_lookup.py runs SGLang's own functions, cut from its
source, on a grid of inputs and compares. Nothing here imports SGLang.
"""

from __future__ import annotations

import os
from pathlib import Path

from tileprobe.engines import triton_configs as tc
from tileprobe.engines.triton_configs import Loaded, Scheme

ENGINE = "sglang"
KERNEL_FILE = "sglang/kernels/ops/moe/fused_moe_triton_kernels.py"
KERNEL = "fused_moe_kernel"
PACKAGE_DIR = "sglang/srt/layers/moe/moe_runner/triton_utils"  # the engine's own config_dir (dirname(__file__))
CONFIGS_DIR = f"{PACKAGE_DIR}/configs"
LOOKUP_FILES = (KERNEL_FILE, f"{PACKAGE_DIR}/fused_moe_triton_config.py")  # what the lookup below was read from
USER_ENV = "SGLANG_MOE_CONFIG_DIR"
NAME_SOURCE = "torch name"  # sglang.srt.utils.get_device_name: torch.cuda.get_device_name(device_id)
# The Triton that release runs with: its torch (pins.TORCH_PINS) pins triton~=3.8.0, and 3.8.0 is the only 3.8 release.
# The engine keys its config folder by triton.__version__ (configs/triton_3_8_0/).
TRITON_VERSION = "3.8.0"
# _LOW_SMEM_FP8_DEFAULT_CUTOFF_BYTES: below this opt-in limit, fp8 per-tensor defaults are the low-smem ones.
LOW_SMEM_CUTOFF = 128 * 1024


def device_file_name(device_name: str) -> str:
    """get_config_file_name: `get_device_name().replace(" ", "_")` (no other replacement, no H200 rule)."""
    return device_name.replace(" ", "_")


def config_file_name(E: int, N: int, scheme: Scheme, device_name: str, down: bool = False) -> str:
    """get_config_file_name: block_shape is Python's list repr (`[128, 128]`, with a space), then
    `,per_channel_quant=True`, then `_down` for the down-projection file."""
    dtype = f",dtype={scheme.dtype}" if scheme.dtype else ""
    bs = list(scheme.block_shape) if scheme.block_shape else [0, 0]
    block = f",block_shape={bs}" if all(bs) else ""
    pcq = ",per_channel_quant=True" if scheme.per_channel else ""
    return f"E={E},N={N},device_name={device_file_name(device_name)}{dtype}{block}{pcq}{'_down' if down else ''}.json"


def user_dir_from_env(environ: dict | None = None) -> str | None:
    return (os.environ if environ is None else environ).get(USER_ENV)


class _Tree:
    """The configs/ folder the engine reads: the user's ($SGLANG_MOE_CONFIG_DIR/configs, on disk) or the shipped one
    (in the engine's package or wheel). SGLANG_MOE_CONFIG_DIR replaces the shipped folder: there is no fallback to
    the shipped files once it is set."""

    def __init__(self, src: tc.EngineSource, user_dir: str | Path | None):
        self.src, self.user = src, (Path(user_dir) if user_dir is not None else None)
        self.source = "user" if self.user is not None else "shipped"
        if self.user is None:
            self.rels = set(src.files_under(CONFIGS_DIR))

    def where(self, sub: str) -> str:
        return str(self.user / "configs" / sub) if self.user is not None else f"<{self.src.label()}>/{CONFIGS_DIR}/{sub}"

    def exists(self, sub: str) -> bool:
        if self.user is not None:
            return (self.user / "configs" / sub).is_file()
        return f"{CONFIGS_DIR}/{sub}" in self.rels

    def version_dirs(self) -> list[str]:
        """os.listdir(configs_root) entries starting with triton_ (files too, as the engine lists them)."""
        if self.user is not None:
            root = self.user / "configs"
            if not root.is_dir():
                raise FileNotFoundError(f"[Errno 2] No such file or directory: '{root}'")
            return [d for d in os.listdir(root) if d.startswith("triton_")]
        tops = {r[len(CONFIGS_DIR) + 1:].split("/", 1)[0] for r in self.rels}
        return [d for d in tops if d.startswith("triton_")]

    def read(self, sub: str) -> tc.ConfigFile:
        if self.user is not None:
            path = self.user / "configs" / sub
            return tc.read_file(path, ENGINE, rel=sub, triton_dir=sub.split("/", 1)[0])
        return tc.read_source_tree_file(self.src, CONFIGS_DIR, f"{CONFIGS_DIR}/{sub}")


def load(src: tc.EngineSource, E: int, N: int, scheme: Scheme, device_name: str,
         user_dir: str | Path | None = None, gemm: str = "gate_up", triton_version: str = TRITON_VERSION) -> Loaded:
    """get_moe_configs for the up (gate_up) or the down file: configs/triton_<this Triton>/<name>, then the other
    triton_* folders newest first; for the down file, then the up file (reused without TMA); else the default."""
    down = gemm == "down"
    fname = config_file_name(E, N, scheme, device_name, down)
    tree = _Tree(src, user_dir)
    vdir = f"triton_{triton_version.replace('.', '_')}"
    tried = [tree.where(f"{vdir}/{fname}")]
    if tree.exists(f"{vdir}/{fname}"):
        f = tree.read(f"{vdir}/{fname}")
        return Loaded(tree.source, f.path, f, tuple(tried))
    try:
        dirs = tree.version_dirs()
    except FileNotFoundError as exc:  # the engine's os.listdir raises here: it never reaches the default
        return Loaded("engine-error", None, None, tuple(tried), f"FileNotFoundError: {exc}")
    versions = sorted((d.removeprefix("triton_").replace("_", ".") for d in dirs),
                      key=lambda v: tuple(int(x) for x in v.split(".")), reverse=True)
    for v in versions:
        if v == triton_version:
            continue
        sub = f"triton_{v.replace('.', '_')}/{fname}"
        tried.append(tree.where(sub))
        if tree.exists(sub):
            f = tree.read(sub)
            return Loaded(tree.source, f.path, f, tuple(tried), f"fallback to triton {v}'s folder")
    if down:
        up = load(src, E, N, scheme, device_name, user_dir, "gate_up", triton_version)
        if up.file is not None:
            return Loaded(up.source, up.path, up.file, tuple(tried) + up.tried, "no _down file: the up file is reused")
    return Loaded("default", None, None, tuple(tried))


def default_config(M: int, E: int, N: int, K: int, topk: int, scheme: Scheme, smem_optin: int) -> dict:
    """get_default_config on CUDA (not HIP, deterministic inference off, not marlin). Shared-memory aware for fp8
    per-tensor: _use_low_smem_fp8_default() is smem_optin < 128 KiB (the device's shared_memory_per_block_optin)."""
    del N, K, topk
    if scheme.dtype == "fp8_w8a8":
        if scheme.block_shape is None:
            if smem_optin < LOW_SMEM_CUTOFF:
                if M > E:
                    return {"BLOCK_SIZE_M": 64, "BLOCK_SIZE_N": 128, "BLOCK_SIZE_K": 256, "GROUP_SIZE_M": 64,
                            "num_warps": 4, "num_stages": 2}
                return {"BLOCK_SIZE_M": 32, "BLOCK_SIZE_N": 64, "BLOCK_SIZE_K": 256, "GROUP_SIZE_M": 1,
                        "num_warps": 4, "num_stages": 4}
            if M <= E:
                return {"BLOCK_SIZE_M": 64, "BLOCK_SIZE_N": 128, "BLOCK_SIZE_K": 128, "GROUP_SIZE_M": 1,
                        "num_warps": 4, "num_stages": 4}
            return {"BLOCK_SIZE_M": 128, "BLOCK_SIZE_N": 256, "BLOCK_SIZE_K": 128, "GROUP_SIZE_M": 32,
                    "num_warps": 8, "num_stages": 4}
        return {"BLOCK_SIZE_M": 64, "BLOCK_SIZE_N": scheme.block_shape[0], "BLOCK_SIZE_K": scheme.block_shape[1],
                "GROUP_SIZE_M": 32, "num_warps": 4, "num_stages": 3}
    if M <= E:
        return {"BLOCK_SIZE_M": 16, "BLOCK_SIZE_N": 32, "BLOCK_SIZE_K": 64, "GROUP_SIZE_M": 1}
    return {"BLOCK_SIZE_M": 64, "BLOCK_SIZE_N": 64, "BLOCK_SIZE_K": 32, "GROUP_SIZE_M": 8}


def down_config(up: dict, down: dict | None) -> dict:
    """try_get_optimal_moe_config(return_down_config=True) and `down_config or config`: the down GEMM runs the
    down file's entry with the up entry's BLOCK_SIZE_M (one moe_align_block_size sort), or the up config itself."""
    if not down:
        return dict(up)
    out = dict(down)
    out["BLOCK_SIZE_M"] = up["BLOCK_SIZE_M"]
    return out
