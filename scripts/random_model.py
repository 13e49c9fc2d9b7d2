"""Rule random_model: a random-initialised control, saved as safetensors (attngeom.pipeline.random_models)."""

from attngeom.pipeline.random_models import build

p = snakemake.params
with open(snakemake.log[0], "w") as log:
    n_params = build(p.model_type, dict(p.settings), p.seed, snakemake.output[0])
    log.write(f"random {p.model_type} {dict(p.settings)} seed {p.seed}: {n_params} parameters\n")
