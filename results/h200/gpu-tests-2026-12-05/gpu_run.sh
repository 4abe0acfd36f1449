#!/bin/bash
# one device call: Triton GPU tests, the vLLM fp8-block triton-moe sweep, CUTLASS GPU tests
set -u
mkdir -p /tmp/.cutlass && tar xJf .cutlass/cutlass.tar.xz -C /tmp/.cutlass
export TILEPROBE_CUTLASS_DIR=/tmp/.cutlass/cutlass PYTHONPATH=$PWD:$PWD/.engine-wheels TILEPROBE_ENGINE_WHEELS=$PWD/.engine-wheels
export TILEPROBE_ANY_TRITON=1 TILEPROBE_PROGRESS=plain TILEPROBE_CACHE_DIR=/tmp/tpc
{ nvidia-smi --query-gpu=name,driver_version --format=csv; nvcc --version | tail -2; python3 -c "import triton,torch;print('triton',triton.__version__,'torch',torch.__version__)"; git log -1 --format=%H 2>/dev/null; } > $OUT/env.txt 2>&1
s=$(date +%s)
timeout 240 python3 -m pytest -o addopts="" -p no:cacheprovider -q -m gpu tests/backends/triton tests/triton/test_triton_tune.py > $OUT/triton_gpu_tests.log 2>&1; echo "rc=$? $(( $(date +%s)-s )) s" >> $OUT/triton_gpu_tests.log
s=$(date +%s)
timeout 150 python3 -m tileprobe sweep --family triton-moe --engine vllm --workload qwen3-30b-a3b --quant fp8-block --any-triton --batch 1,8,32,128 --out /tmp/w/vllm_fp8-block > $OUT/sweep.log 2>&1; echo "rc=$? $(( $(date +%s)-s )) s" >> $OUT/sweep.log
cp /tmp/w/vllm_fp8-block/results.csv $OUT/vllm_fp8-block.csv 2>/dev/null
s=$(date +%s)
timeout 170 python3 -m pytest -o addopts="" -p no:cacheprovider -q -m gpu tests/backends/cutlass/test_gpu.py tests/guard > $OUT/cutlass_gpu_tests.log 2>&1; echo "rc=$? $(( $(date +%s)-s )) s" >> $OUT/cutlass_gpu_tests.log
tail -3 $OUT/*.log
