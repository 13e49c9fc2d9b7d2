"""The rules' conda environment, one per checkout (``--software-deployment-method conda``).

``envs/attngeom.yaml`` pins the dependencies and its post-deploy step installs attngeom, editable, from the
checkout whose workflow runs. Snakemake names an environment by the content of those two files and the
``--conda-prefix``, so with a shared prefix (usual on a cluster) a second clone would reuse the first
clone's environment and run the first clone's code. The workflow therefore hands Snakemake a copy of both
files that names its checkout in a comment: each checkout gets an environment of its own, the same one on
every run (whatever the working directory), and an editable install keeps it running the checkout's
current code, as the rules' ``code`` params expect. Light (no torch, pandas or pyarrow): it runs when the
DAG is built.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from ..files import write_text

POST_DEPLOY = ".post-deploy.sh"
"""What Snakemake looks for beside an environment file ``<name>.yaml``: ``<name>.post-deploy.sh``."""


def checkout_env(env_file: Path, checkout: Path, folder: Path) -> Path:
    """``env_file`` and its post-deploy script copied into ``folder``/<digest of ``checkout``>/, the
    environment file headed by a line naming ``checkout``; the copy's path. Files already as they should be
    are left alone (a SLURM job builds the DAG again, beside the other jobs)."""
    checkout = checkout.resolve()
    target = folder / hashlib.sha256(str(checkout).encode()).hexdigest()[:16] / env_file.name
    deploy = env_file.with_name(env_file.name.removesuffix(".yaml") + POST_DEPLOY)
    header = f"# attngeom's rule environment for the checkout {checkout} (a copy of {env_file.name})\n"
    _write_if_changed(target, header + env_file.read_text())
    _write_if_changed(target.with_name(deploy.name), deploy.read_text())
    return target


def _write_if_changed(path: Path, text: str) -> None:
    if not (path.is_file() and path.read_text() == text):
        write_text(path, text)
