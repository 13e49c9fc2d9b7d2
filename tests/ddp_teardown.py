"""``attngeom train`` on one torchrun rank, saying how many DDP wrappers are alive when the run destroys
its process group (``python ddp_teardown.py train ...``, launched by torchrun).

A wrapper alive then is freed afterwards, and its reducer drops the gloo group's last reference while
holding the GIL, which can deadlock the rank's exit (``attngeom.training.loop._leave_process_group``).
The count includes wrappers that only a reference cycle keeps, which the collector would free later.
"""

from __future__ import annotations

import gc
import sys

import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

from attngeom.cli import main

ALIVE = "DDP wrappers alive when the process group is destroyed:"

destroy_process_group = dist.destroy_process_group


def counting_destroy_process_group(*args, **kwargs) -> None:
    """torch's own ``destroy_process_group``, after printing the count."""
    alive = sum(isinstance(item, DistributedDataParallel) for item in gc.get_objects())
    print(f"{ALIVE} {alive}", flush=True)
    destroy_process_group(*args, **kwargs)


if __name__ == "__main__":
    dist.destroy_process_group = counting_destroy_process_group
    sys.exit(main(sys.argv[1:]))
