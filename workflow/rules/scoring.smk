# Score one model: results/scores/<slug>.parquet and a status file (ok, failed or crashed, and why).
# Rule score on a CPU, rule score_gpu on a GPU (`scoring: device`, `gpu_min_params`): the same job, in a
# rule of its own so that a cluster profile can send it to a GPU partition (profiles/slurm). A zoo's CPU
# models are scored in batches instead (rule score_zoo, attngeom.pipeline.batches): one job and one process
# for up to `zoo: batch_size` models, whose records are the batch's two files (scores/zoo/<batch>.*).


rule score:
    input:
        score_input,
    output:
        scores=f"{R}/scores/{{slug}}.parquet",
        status=f"{R}/scores/{{slug}}.status.json",
    log:
        f"{R}/logs/score/{{slug}}.log",
    benchmark:
        f"{R}/benchmarks/score/{{slug}}.tsv"
    wildcard_constraints:
        slug=slugs_pattern(s for s in MODELS if s not in BATCH_OF and s not in ON_GPU),
    group:
        score_group
    conda:
        ENV
    threads: resource("threads")
    resources:
        mem_mb=resource("mem_mb"),
        runtime=resource("runtime"),
        disk_mb=resource("disk_mb"),
        gpu=resource("gpu"),
    params:
        model=lambda wildcards: model_of(wildcards).id,
        location=lambda wildcards: model_of(wildcards).location,
        local=lambda wildcards: model_of(wildcards).kind != "hub",
        revision=lambda wildcards: model_of(wildcards).revision or "",
        device=score_device,
        dtype=SCORING["dtype"],
        variant=SCORING["variant"],
        full_download=SCORING["full_download"],
        code=code_of("score_model.py"),
    script:
        "../../scripts/score_model.py"


use rule score as score_gpu with:
    wildcard_constraints:
        slug=slugs_pattern(ON_GPU),


rule score_zoo:
    output:
        scores=f"{R}/scores/zoo/{{batch}}.parquet",
        status=f"{R}/scores/zoo/{{batch}}.status.json",
    log:
        f"{R}/logs/score_zoo/{{batch}}.log",
    benchmark:
        f"{R}/benchmarks/score_zoo/{{batch}}.tsv"
    wildcard_constraints:
        batch="|".join(ZOO_BATCHES) or "(?!)",
    conda:
        ENV
    threads: lambda wildcards: zoo_batch(wildcards).resources.threads
    resources:
        mem_mb=lambda wildcards: zoo_batch(wildcards).resources.mem_mb,
        runtime=lambda wildcards: zoo_batch(wildcards).resources.runtime,
        disk_mb=lambda wildcards: zoo_batch(wildcards).resources.disk_mb,
        gpu=lambda wildcards: zoo_batch(wildcards).resources.gpu,
    params:
        models=batch_models("id"),
        locations=batch_models("location"),
        revisions=batch_models("revision"),
        device=lambda wildcards: "cuda" if zoo_batch(wildcards).resources.gpu else "cpu",
        dtype=SCORING["dtype"],
        variant=SCORING["variant"],
        full_download=SCORING["full_download"],
        code=code_of("score_batch.py"),
    script:
        "../../scripts/score_batch.py"
