"""Rule random_model: a random-initialised control, saved as safetensors (attngeom.pipeline.random_models).

Settings that cannot be built leave a note instead, which the model's score job records as its failure."""

from attngeom.pipeline.job_log import to_rule_log

to_rule_log(snakemake.log[0])

from attngeom.pipeline.random_models import build_or_note

p = snakemake.params
print(build_or_note(p.model_type, dict(p.settings), p.seed, snakemake.output[0]))
