#!/bin/sh
# The MPS check, on a machine with an NVIDIA GPU and its driver's nvidia-cuda-mps-control: two tiny training
# runs with `runs_per_gpu: 2` and `mps: true` go through the pipeline's own train rule (snakemake, profiles/local)
# on GPU 0; the test asserts that both finished, that one job started the MPS control daemon and one quit it
# (the last to leave), that both logged "GPU sharing: mps", and that the daemon started a server (its
# control.log, printed with both train logs). The GPU's settings (compute mode) are not changed.
#
#     sh benchmarks/mps_check.sh            # PYTHON=... to use another interpreter than .venv/bin/python
set -eu
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-.venv/bin/python}
if ! command -v nvidia-cuda-mps-control >/dev/null || ! command -v nvidia-smi >/dev/null; then
    echo "mps_check: error: no nvidia-cuda-mps-control or nvidia-smi on PATH; run it on a machine with an NVIDIA GPU" >&2
    exit 2
fi
nvidia-smi --query-gpu=index,name,driver_version,compute_mode --format=csv
exec "$PYTHON" -m pytest -q -s -rs -m gpu -p no:cacheprovider tests/test_gpu_mps.py "$@"
