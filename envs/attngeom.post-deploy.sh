#!/usr/bin/env bash
# Install attngeom, without its dependencies (envs/attngeom.yaml pins them), from the checkout whose workflow
# runs: Snakemake runs this script in its own working directory (--directory .test, or another workflow's
# folder when attngeom is its module), so workflow/Snakefile exports the checkout's path as ATTNGEOM_CHECKOUT.
set -euo pipefail
checkout="${ATTNGEOM_CHECKOUT:-}"
if [ ! -f "$checkout/pyproject.toml" ]; then
  echo "attngeom: error: ATTNGEOM_CHECKOUT='$checkout' is not an attngeom checkout; run this through attngeom's workflow/Snakefile (a local clone)" >&2
  exit 2
fi
python -m pip install --no-deps --no-build-isolation -e "$checkout"
