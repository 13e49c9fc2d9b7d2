# Every model's scores in one table, then Tables S2/S3, the summary and the comparison with the paper.


rule aggregate:
    input:
        scores=score_files(MODELS, "scores"),
        status=score_files(MODELS, "status"),
    output:
        scores=f"{R}/aggregate/scores.parquet",
        models=f"{R}/aggregate/models.csv",
    log:
        f"{R}/logs/aggregate.log",
    conda:
        ENV
    threads: 1
    resources:
        mem_mb=AGGREGATE_MEM_MB,
        runtime=30,
    params:
        models=[model.table_row() for model in MODELS.values()],
        code=code_of("aggregate.py"),
    script:
        "../../scripts/aggregate.py"


rule tables:
    input:
        scores=rules.aggregate.output.scores,
        models=rules.aggregate.output.models,
    output:
        summary=report(f"{R}/tables/summary.csv", **shown("summary")),
        summary_page=report(f"{R}/tables/summary.html", **shown("summary")),
        s2=report(
            multiext(f"{R}/tables/table_s2", ".csv", ".md", ".tex", ".html"),
            **shown("table_s2"),
        ),
        s3=report(
            multiext(f"{R}/tables/table_s3", ".csv", ".md", ".tex", ".html"),
            **shown("table_s3"),
        ),
    log:
        f"{R}/logs/tables.log",
    conda:
        ENV
    threads: 1
    resources:
        mem_mb=AGGREGATE_MEM_MB,
        runtime=30,
    params:
        s2_scope=SCOPE["table_s2"],
        s3_scope=SCOPE["table_s3"],
        code=code_of("tables.py"),
    script:
        "../../scripts/tables.py"


rule reference_comparison:
    input:
        scores=rules.aggregate.output.scores,
        models=rules.aggregate.output.models,
        reference=REFERENCE / "official_per_layer_scores.csv",
        defects=REFERENCE / "known_defects.csv",
    output:
        layers=f"{R}/tables/reference_comparison_layers.csv",
        table=report(
            multiext(f"{R}/tables/reference_comparison", ".csv", ".md", ".tex", ".html"),
            **shown("reference_comparison"),
        ),
    log:
        f"{R}/logs/reference_comparison.log",
    conda:
        ENV
    threads: 1
    resources:
        mem_mb=AGGREGATE_MEM_MB,
        runtime=30,
    params:
        code=code_of("compare_reference.py"),
    script:
        "../../scripts/compare_reference.py"
