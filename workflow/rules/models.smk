# Random-initialised controls: AutoConfig.for_model(model_type, **settings), saved as safetensors.


rule random_model:
    output:
        directory(f"{R}/models/random/{{slug}}"),
    log:
        f"{R}/logs/random_model/{{slug}}.log",
    wildcard_constraints:
        slug="|".join(re.escape(s) for s, m in MODELS.items() if m.kind == "random") or "(?!)",
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
