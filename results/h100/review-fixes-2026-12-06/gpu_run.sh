#!/bin/bash
# one device call: the review fixes on a GPU (audit runtime exit codes and --model; triton-moe fp8 per-expert scales;
# TILEPROBE_FAULT on the Triton path; conftest fetches nothing under -m gpu)
set -u
C=$PWD/.gpu-carry-faults  # carried: platformdirs wheel, slim engine wheels (tools/slim_engine_wheel.py; python -m tileprobe.audit.runtime --slim)
export PYTHONPATH=$PWD:$C/platformdirs-4.12.2-py3-none-any.whl TILEPROBE_ENGINE_WHEELS=$C/engine-wheels
export TILEPROBE_ANY_TRITON=1 TILEPROBE_PROGRESS=plain TILEPROBE_CACHE_DIR=/tmp/tpc PYTHONUNBUFFERED=1
{ nvidia-smi --query-gpu=name,driver_version --format=csv; python3 -c "import triton,torch;print('triton',triton.__version__,'torch',torch.__version__)"; } > $OUT/env.txt 2>&1
t() { local name=$1; shift; local s=$(date +%s); "$@" > $OUT/$name.log 2>&1; echo "rc=$? $(( $(date +%s)-s )) s" >> $OUT/$name.log; }
t audit_runtime timeout 150 python3 -m tileprobe.audit.runtime --out /tmp/ar --wheels $C/audit-wheels --case sglang-decode-gqa --case sglang-extend-window-sinks --case vllm-unified-decode-window-sinks --case vllm-mla-decode
t audit_runtime_model timeout 150 python3 -m tileprobe.audit.runtime --out /tmp/arm --wheels $C/audit-wheels --model results/audit/models/gemma-3-4b.json
t sweep_fp8 timeout 150 python3 -m tileprobe sweep --family triton-moe --engine vllm --workload qwen3-30b-a3b --quant fp8 --any-triton --batch 1,8 --seed 11 --out /tmp/w/clean
TILEPROBE_FAULT=corrupt:1:0 t sweep_fp8_fault timeout 150 python3 -m tileprobe sweep --family triton-moe --engine vllm --workload qwen3-30b-a3b --quant fp8 --any-triton --batch 1,8 --seed 11 --out /tmp/w/fault
TILEPROBE_FAULT=sticky:1 t sweep_fp8_badfault timeout 60 python3 -m tileprobe sweep --family triton-moe --engine vllm --workload qwen3-30b-a3b --quant fp8 --any-triton --batch 1 --out /tmp/w/bad
python3 - > $OUT/sweep_rows.txt 2>&1 <<'PY'
import json
for name in ("clean", "fault"):
    for line in open(f"/tmp/w/{name}/results.jsonl"):
        r = json.loads(line)
        if r.get("point_id") is not None:
            print(name, r["gemm"], r["batch"], r["point_id"], r["verdict"], r["bad_elements"], r["bad_groups"], r["worst_group"], (r["reason"] or "")[:120])
PY
t gpu_contract timeout 200 python3 -m pytest -o addopts="" -p no:cacheprovider -q -m gpu tests/backends/triton/test_gpu_contract.py
TILEPROBE_ENGINE_WHEELS=$C/audit-wheels t gpu_audit timeout 200 python3 -m pytest -o addopts="" -p no:cacheprovider -q -m gpu tests/audit/test_gpu_runtime.py
TILEPROBE_ENGINE_WHEELS=$C/audit-wheels t new_tests timeout 200 python3 -m pytest -o addopts="" -p no:cacheprovider -q tests/backends/triton/test_runtime_faults.py tests/results/test_tolerance.py tests/audit/test_runtime_cli.py
tail -n 4 $OUT/*.log; cat $OUT/sweep_rows.txt
