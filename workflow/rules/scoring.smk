# Score one model: results/scores/<slug>.parquet and a status file (ok, failed or crashed, and why).
# Rule score on a CPU, rule score_gpu on a GPU (`scoring: device`, `gpu_min_params`): the same job, in a
# rule of its own so that a cluster profile can send it to a GPU partition (profiles/slurm). A zoo's CPU
# models are scored in batches instead (rules score_zoo_*, attngeom.pipeline.batches): one job and one
# process for up to `zoo: batch_size` models, each model's files as rule score writes them.


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
        slug=slugs_pattern(s for s in MODELS if s not in BATCHED and s not in ON_GPU),
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


for _batch in ZOO_BATCHES:

    rule:
        name:
            f"score_zoo_{_batch.name}"
        output:
            scores=expand(rules.score.output.scores, slug=_batch.slugs),
            status=expand(rules.score.output.status, slug=_batch.slugs),
        log:
            expand(f"{R}/logs/score/{{slug}}.log", slug=_batch.slugs),
        benchmark:
            f"{R}/benchmarks/score_zoo/{_batch.name}.tsv"
        conda:
            ENV
        threads: _batch.resources.threads
        resources:
            mem_mb=_batch.resources.mem_mb,
            runtime=_batch.resources.runtime,
            disk_mb=_batch.resources.disk_mb,
            gpu=_batch.resources.gpu,
        params:
            models=[MODELS[s].id for s in _batch.slugs],
            locations=[MODELS[s].location for s in _batch.slugs],
            revisions=[MODELS[s].revision or "" for s in _batch.slugs],
            device="cuda" if _batch.resources.gpu else "cpu",
            dtype=SCORING["dtype"],
            variant=SCORING["variant"],
            full_download=SCORING["full_download"],
            code=code_of("score_batch.py"),
        script:
            "../../scripts/score_batch.py"
