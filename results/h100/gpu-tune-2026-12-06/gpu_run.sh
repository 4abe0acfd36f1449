#!/bin/bash
# one device call: tests/triton/test_triton_tune.py -m gpu (test_gpu_tune_of_a_few_configs) under the device's own
# Triton (3.6.0), twice: cold caches, then warm (the same TILEPROBE_CACHE_DIR). Carried: .gpu-carry-tune (platformdirs
# wheel; a slim vLLM 0.33.0 wheel = METADATA + the 66 files of tileprobe/engines/manifests/vllm-0.33.0.json + the
# fused_moe config tree, cut from the PyPI wheel; never committed).
set -u
C=$PWD/.gpu-carry-tune
export PYTHONPATH=$PWD:$C/platformdirs-4.12.2-py3-none-any.whl TILEPROBE_ENGINE_WHEELS=$C/engine-wheels
export TILEPROBE_ANY_TRITON=1 TILEPROBE_PROGRESS=plain TILEPROBE_CACHE_DIR=/tmp/tpc PYTHONUNBUFFERED=1
{ nvidia-smi --query-gpu=name,driver_version,compute_cap --format=csv; python3 -c "import sys,triton,torch;print('python',sys.version.split()[0],'triton',triton.__version__,'torch',torch.__version__,'cuda',torch.version.cuda)"; python3 -m pytest --version; } > $OUT/env.txt 2>&1
for pass in cold warm; do
  s=$(date +%s)
  timeout 240 python3 -m pytest -o addopts="" -p no:cacheprovider -v -rA -m gpu --basetemp=/tmp/pt_$pass \
    --junitxml=$OUT/junit_$pass.xml tests/triton/test_triton_tune.py > $OUT/tune_$pass.log 2>&1
  echo "rc=$? $(( $(date +%s)-s )) s" >> $OUT/tune_$pass.log
  python3 - /tmp/pt_$pass >> $OUT/tune_$pass.log 2>&1 <<'PY'
import json, sys, glob
for p in glob.glob(sys.argv[1] + "/test_gpu_tune_of_a_few_configs0/out/tileprobe-provenance.json"):
    d = json.load(open(p))
    print("PROV target", d["target"], "engine", d["engine"], "seed", d["seed"], "evidence", d["evidence"], "limit", d["smem_limit_bytes"])
    print("PROV totals", json.dumps(d["totals"]))
    for f, info in d["files"].items():
        for m, r in info["entries"].items():
            print("PROV", f.split("/")[-1], "M=" + m, "winner", r.get("winner"), "us_graph_median", r.get("us_graph_median"),
                  "left", r.get("left"), "pruned", r.get("pruned_configs"), "launches", r.get("launches"))
PY
done
cp /tmp/pt_cold/test_gpu_tune_of_a_few_configs0/out/tileprobe-provenance.json $OUT/provenance_cold.json 2>/dev/null
tail -n 25 $OUT/tune_*.log
