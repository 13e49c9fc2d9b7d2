# Score one model: results/scores/<slug>.parquet and a status file (ok, failed or crashed, and why).


rule score:
    input:
        lambda wildcards: weights_input(model_of(wildcards)),
    output:
        scores=f"{R}/scores/{{slug}}.parquet",
        status=f"{R}/scores/{{slug}}.status.json",
    log:
        f"{R}/logs/score/{{slug}}.log",
    params:
        model=lambda wildcards: model_of(wildcards).id,
        location=lambda wildcards: model_of(wildcards).location,
        revision=lambda wildcards: model_of(wildcards).revision or "",
        device=score_device,
        dtype=SCORING["dtype"],
        variant=SCORING["variant"],
        full_download=SCORING["full_download"],
    threads: resource("threads")
    resources:
        mem_mb=resource("mem_mb"),
        runtime=resource("runtime"),
        disk_mb=resource("disk_mb"),
        gpu=resource("gpu"),
    conda:
        ENV
    script:
        "../../scripts/score_model.py"
