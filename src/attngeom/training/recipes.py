"""The two recipes the paper's training can mean: what its text says (Appendix S2.3) and what the authors'
code (``custom-models-training/train.py``, github matteosaponati/attention-geometry) computes.

Plain data, read by ``config.make_config`` (``TrainConfig.recipe``) and by the run folder, which records
how each run differs from both (``runs.paper_differences``).
"""

from __future__ import annotations

from typing import Any

PAPER: dict[str, Any] = {
    "steps": 200_000,
    "batch_documents": 256,
    "seq_len": 512,
    "lr": 5e-5,
    "warmup_steps": 200,
    "weight_decay": 0.01,
    "mlm_probability": 0.15,
    "dropout": 0.1,
    "grad_clip": 1.0,
}
"""The paper's optimisation as its text gives it (Appendix S2.3): 200,000 updates of 256 sequences, one
document each, up to 512 tokens; AdamW, lr 5e-5, 200 warm-up steps then linear decay, weight decay 0.01;
15% masking; BERT's dropout 0.1; gradients clipped at norm 1 (the Trainer's default)."""

AUTHORS_CODE: dict[str, Any] = {
    **PAPER,
    "masking": "bernoulli",
    "loss_average": "micro_batch",
    "grad_accum": 8,
    "decoder_loss": "masked",
    "tokenizer": "bert-uncased",
}
"""What the authors' ``custom-models-training/train.py`` computes beyond the text: transformers'
``DataCollatorForLanguageModeling`` (each token masked with p = 0.15), the ``Trainer``'s mean of 8
accumulation steps of 32 documents, decoders (``BertLMHeadModel``) fed through that collator, BERT's
uncased vocabulary. Their symmetric arm is the init arm ``inits.AUTHORS``."""

RECIPES: dict[str, dict[str, Any]] = {
    "paper_text": PAPER,
    "authors_code": AUTHORS_CODE,
    "authors_code_characters": {**AUTHORS_CODE, "character_spacing": True},
}
"""The presets of ``TrainConfig.recipe``."""

NOT_OFFERED = {
    "precision": "fp16 mixed precision with a loss scaler (attngeom trains in bf16 autocast on a GPU)",
    "lr_warmup": "the Trainer's warm-up starts at lr 0 at update 0 (attngeom's at lr/warmup_steps)",
}
"""What the authors ran that attngeom does not offer, as every run's config.yaml says."""

PAPER_CORPORA = {"wikipedia": True, "red_pajama": True, "jigsaw": False}
"""The paper's corpora and whether the authors' code spaced out their characters."""
