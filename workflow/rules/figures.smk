# Figures 2, S1, S2 and the per-head view of every model, each as PDF and PNG: the PNG in the report, the
# PDF linked from its caption (a PDF registered too would show each figure twice, once as a frame that is
# blank without a PDF viewer).


rule heatmap_matrix:
    input:
        weights=lambda wildcards: weights_input(HEATMAPS[wildcards.role][0]),
        scores=lambda wildcards: score_files([HEATMAPS[wildcards.role][0].slug], "scores")[0],
        status=lambda wildcards: score_files([HEATMAPS[wildcards.role][0].slug], "status")[0],
    output:
        f"{R}/heatmaps/{{role}}.npz",
    log:
        f"{R}/logs/heatmap/{{role}}.log",
    wildcard_constraints:
        role="|".join(HEATMAPS) or "(?!)",
    conda:
        ENV
    resources:
        mem_mb=4096,
        runtime=30,
    params:
        model=lambda wildcards: HEATMAPS[wildcards.role][0].id,
        display=lambda wildcards: HEATMAPS[wildcards.role][0].display,
        location=lambda wildcards: HEATMAPS[wildcards.role][0].location,
        revision=lambda wildcards: HEATMAPS[wildcards.role][0].revision,
        layer=lambda wildcards: HEATMAPS[wildcards.role][1],
        max_dim=config["figures"]["heatmap_max_dim"],
        code=code_of("extract_wqk.py"),
    script:
        "../../scripts/extract_wqk.py"


rule figure_2:
    input:
        summary=rules.tables.output.summary,
        heatmaps=expand(
            rules.heatmap_matrix.output, role=[r for r in ("encoder", "decoder") if r in HEATMAPS]
        ),
        runs=trained_finals(),
    output:
        pdf=f"{R}/figures/figure_2.pdf",
        png=report(f"{R}/figures/figure_2.png", **shown("figure_2")),
    log:
        f"{R}/logs/figure_2.log",
    conda:
        ENV
    threads: 1
    resources:
        mem_mb=AGGREGATE_MEM_MB,
        runtime=30,
    params:
        scope=SCOPE["figure_2"],
        code=code_of("figures.py"),
    script:
        "../../scripts/figures.py"


use rule figure_2 as figure_s1 with:
    input:
        scores=score_files(group_slugs("figure_s1"), "scores"),
        status=score_files(group_slugs("figure_s1"), "status"),
        runs=group_finals("figure_s1"),
    output:
        pdf=f"{R}/figures/figure_s1.pdf",
        png=report(f"{R}/figures/figure_s1.png", **shown("figure_s1")),
    log:
        f"{R}/logs/figure_s1.log",
    params:
        scope=SCOPE["figure_s1"],
        models=[MODELS[s].table_row() for s in group_slugs("figure_s1")],


use rule figure_2 as figure_s2 with:
    input:
        scores=score_files(group_slugs("figure_s2"), "scores"),
        status=score_files(group_slugs("figure_s2"), "status"),
        runs=group_finals("figure_s2"),
    output:
        pdf=f"{R}/figures/figure_s2.pdf",
        png=report(f"{R}/figures/figure_s2.png", **shown("figure_s2")),
    log:
        f"{R}/logs/figure_s2.log",
    params:
        scope=SCOPE["figure_s2"],
        models=[MODELS[s].table_row() for s in group_slugs("figure_s2")],


rule figure_heads:
    input:
        scores=lambda wildcards: score_files([wildcards.slug], "scores")[0],
        status=lambda wildcards: score_files([wildcards.slug], "status")[0],
    output:
        pdf=f"{R}/figures/heads/{{slug}}.pdf",
        png=report(
            f"{R}/figures/heads/{{slug}}.png",
            **shown("heads"),
            labels=heads_labels,
        ),
    log:
        f"{R}/logs/figure_heads/{{slug}}.log",
    conda:
        ENV
    threads: 1
    resources:
        mem_mb=2048,
        runtime=10,
    params:
        model=lambda wildcards: model_of(wildcards).id,
        title=lambda wildcards: f"{model_of(wildcards).display}: per-head scores by layer",
        code=code_of("figure_heads.py"),
    script:
        "../../scripts/figure_heads.py"
