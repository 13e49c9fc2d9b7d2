# The GPUs of this machine, when the jobs run here (Snakemake schedules them on its own cores: no --jobs
# for a cluster executor). The global resource `gpu` becomes the number of GPUs found (CUDA_VISIBLE_DEVICES
# if set, else nvidia-smi), unless given with --resources gpu=K; each job takes GPUs of its own
# (attngeom.pipeline.gpus.job_gpus) so no two jobs share one. Training runs with `runs_per_gpu: K` are
# the exception: each GPU is cut into SLOTS_PER_GPU slots (the least common multiple of the runs' K) and
# such a run takes 1/K of one GPU's slots; the global resource `gpu_slots` is then `gpu` × SLOTS_PER_GPU,
# and every train job counts its slots in it. Under SLURM the scheduler pins GPUs itself, and K shared
# runs go in one job with one GPU (job group gpu_share_K, profiles/slurm/README.md).
import sys

from attngeom.pipeline.gpus import lock_folder, machine_gpus, share_gpus
from attngeom.pipeline.training_runs import share_group, share_problem, slots_per_gpu

GPUS_HERE = workflow.is_main_process and workflow.nodes is None
"""The jobs run on this machine (the local profile), so this process hands out its GPUs."""
SLOTS_PER_GPU = slots_per_gpu(TRAINING_RUNS)

if GPUS_HERE:
    _gpus, _warning = machine_gpus()
    if _warning:
        print(f"attngeom: warning: {_warning}", file=sys.stderr)
    share_gpus(_gpus, lock_folder(), slots_per_gpu=SLOTS_PER_GPU)
    if "gpu" not in workflow.global_resources.keys():
        workflow.register_resource("gpu", len(_gpus))
    if SLOTS_PER_GPU > 1 and "gpu_slots" not in workflow.global_resources.keys():
        workflow.register_resource("gpu_slots", workflow.global_resources["gpu"].value * SLOTS_PER_GPU)


def train_group(wildcards):
    """The job group of a train job (attngeom.pipeline.training_runs.share_group). Under a cluster
    profile a run that shares its GPU stops the workflow with one line if the profile would not put K
    of them side by side in one job (evaluated when the DAG is built: the profile's group-components
    are not known before)."""
    run = TRAINING_RUNS[wildcards.run]
    if not GPUS_HERE and workflow.is_main_process:
        components = workflow.group_settings.group_components
        cores = workflow.global_resources["_cores"].value
        if problem := share_problem({run.name: run}, components, cores):
            print(f"attngeom: error: {problem}", file=sys.stderr)
            sys.exit(2)
    return share_group(run)
