#!/bin/bash
set -u
export TILEPROBE_CUTLASS_DIR=/tmp/.cutlass/cutlass TILEPROBE_ANY_TRITON=1 TILEPROBE_PROGRESS=plain TILEPROBE_CACHE_DIR=/tmp/tpc
s=$(date +%s)
PYTHONPATH=$PWD:$PWD/.engine-wheels TILEPROBE_ENGINE_WHEELS=$PWD/.engine-wheels timeout 120 python3 -m pytest -o addopts="" -p no:cacheprovider -q -m gpu tests/triton/test_triton_tune.py > $OUT/tune_warm.log 2>&1; echo "rc=$? $(( $(date +%s)-s )) s" >> $OUT/tune_warm.log
s=$(date +%s)
PYTHONPATH=$PWD:$PWD/.engine-wheels TILEPROBE_ENGINE_WHEELS=$PWD/.cutlass/audit-wheels timeout 300 python3 -m pytest -o addopts="" -p no:cacheprovider -q -m gpu tests/audit/test_gpu_runtime.py > $OUT/audit_gpu.log 2>&1; echo "rc=$? $(( $(date +%s)-s )) s" >> $OUT/audit_gpu.log
tail -n 3 $OUT/tune_warm.log $OUT/audit_gpu.log
