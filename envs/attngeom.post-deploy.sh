#!/usr/bin/env bash
# Install attngeom from the checkout Snakemake runs in (its working directory), without touching deps.
set -euo pipefail
python -m pip install --no-deps --no-build-isolation -e .
