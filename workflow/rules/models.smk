# Where each model's weights come from, before it is scored: random-initialised controls are built here
# (AutoConfig.for_model(model_type, **settings), saved as safetensors), trained models by rule train, and
# the Hub's and local models are recorded by rule model_source (id, location, commit). So every model of
# the config is scored one step after its source, and the report's rule graph, which draws a rule once per
# level of the DAG, draws score and figure_heads once. (A zoo's batches read their pinned list instead.)


rule random_model:
    output:
        directory(f"{R}/models/random/{{slug}}"),
    log:
        f"{R}/logs/random_model/{{slug}}.log",
    wildcard_constraints:
        slug=slugs_pattern(s for s, m in MODELS.items() if m.kind == "random"),
    conda:
        ENV
    threads: 1
    resources:
        mem_mb=2048,
        runtime=10,
        disk_mb=1024,
    params:
        model_type=lambda wildcards: model_of(wildcards).random["model_type"],
        settings=lambda wildcards: {k: v for k, v in model_of(wildcards).random.items() if k != "model_type"},
        seed=lambda wildcards: model_of(wildcards).seed,
        code=code_of("random_model.py"),
    script:
        "../../scripts/random_model.py"


rule model_source:
    output:
        f"{R}/models/source/{{slug}}.json",
    log:
        f"{R}/logs/model_source/{{slug}}.log",
    wildcard_constraints:
        slug=slugs_pattern(SOURCED),
    localrule: True
    params:
        source=lambda wildcards: model_of(wildcards).source(portable),
    run:
        record_source(params.source, output[0], log[0])
