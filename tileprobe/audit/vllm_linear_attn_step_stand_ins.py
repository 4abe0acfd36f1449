"""The stand-ins vLLM's linear-attention (lightning) step needs (tileprobe.audit.vllm_linear_attn_step): the metadata
builder (vllm/v1/attention/backends/linear_attn.py, served from the wheel with vllm/v1/attention/backend.py and
vllm/v1/kv_cache_interface.py) and lightning_attn.py's launchers (the target's Triton driver, CUDA's platform
answers).

Beside tileprobe.audit.vllm_backend_stand_ins' and tileprobe.audit.entries.vllm_gdn's (triton_utils, platforms):
- `vllm.config`: the builder's module imports `CompilationConfig` and `VllmConfig` for annotations only; both are
  bare names here (the step builds the config the builder reads, and says which fields it sets), CUDAGraphMode read
  from the wheel (tileprobe.audit.vllm_backend_stand_ins.config);
- `vllm.v1.attention.backends.utils`: the builder's helpers `split_decodes_and_prefills` and
  `mamba_get_block_table_tensor` and lightning_attn.py's PAD_SLOT_ID, read from the wheel's text (as the GDN step's:
  tileprobe.audit.vllm_gdn_step_stand_ins.backend_utils);
- `vllm.utils.torch_utils`: as the GDN step's (tileprobe.audit.vllm_gdn_step_stand_ins.torch_utils).
"""

from __future__ import annotations

from tileprobe.audit import vllm_backend_stand_ins as backend_stand_ins
from tileprobe.audit import vllm_gdn_step_stand_ins as gdn_stand_ins
from tileprobe.audit.entries import vllm_gdn
from tileprobe.engines.triton_configs import EngineSource
from tileprobe.targets import Target


def config(target: Target, source: EngineSource) -> dict:
    return {**backend_stand_ins.config(target, source), "CompilationConfig": type("CompilationConfig", (), {})}


STAND_INS = {**backend_stand_ins.STAND_INS_SERVED, **vllm_gdn.GDN_STAND_INS, "vllm.config": config,
             "vllm.utils.torch_utils": gdn_stand_ins.torch_utils,
             "vllm.v1.attention.backends.utils": gdn_stand_ins.backend_utils}
STAND_INS.pop("vllm.v1.kv_cache_interface", None)
