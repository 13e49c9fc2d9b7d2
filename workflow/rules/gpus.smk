# The GPUs of this machine, when the jobs run here (Snakemake schedules them on its own cores: no --jobs
# for a cluster executor). The global resource `gpu` becomes the number of GPUs found (CUDA_VISIBLE_DEVICES
# if set, else nvidia-smi), unless given with --resources gpu=K; each job takes GPUs of its own
# (attngeom.pipeline.gpus.job_gpus) so no two jobs share one. Under SLURM the scheduler pins GPUs itself.
import sys

from attngeom.pipeline.gpus import lock_folder, machine_gpus, share_gpus

if workflow.is_main_process and workflow.nodes is None:
    _gpus, _warning = machine_gpus()
    if _warning:
        print(f"attngeom: warning: {_warning}", file=sys.stderr)
    share_gpus(_gpus, lock_folder())
    if "gpu" not in workflow.global_resources.keys():
        workflow.register_resource("gpu", len(_gpus))
