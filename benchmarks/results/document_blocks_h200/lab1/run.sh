#!/usr/bin/env bash
mkdir -p "$OUT/lab1"
export PYTHONPATH=/tmp/site:$PWD/src:$PWD/benchmarks PYTHONUNBUFFERED=1
{ date -u +"start %Y-%m-%dT%H:%M:%SZ"; nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv; python3 -c "import torch, triton; print(torch.__version__, triton.__version__)"; } > "$OUT/lab1/machine.txt" 2>&1
timeout 400 python3 benchmarks/results/document_blocks_h200/lab1/time_variants.py "$OUT/lab1/lab.json" 2>&1 | tee "$OUT/lab1/lab.log" | grep -v Warning
date -u +"end %Y-%m-%dT%H:%M:%SZ" >> "$OUT/lab1/machine.txt"
