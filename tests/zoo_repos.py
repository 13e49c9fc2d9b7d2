"""Tiny Hub repositories of mixed families and formats, for zoo queries (tests and benchmarks/bench_zoo.py).

A few dozen distinct tiny models (``KINDS`` × ``SEEDS``) are written once; each repository is a folder of
hard links to one of them, so a thousand repositories take the disk of a few dozen. The mix is what a
real listing brings: safetensors (single and sharded), PyTorch ``.bin``, GGUF-only repositories, model
types attngeom has no map for, broken repositories and gated ones. ``make_zoo`` also returns each
repository's listing fields (downloads, tags, config, ...) for ``HubServer(infos=...)`` and the outcome
a scoring job must record for it.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
from dataclasses import dataclass, field
from pathlib import Path

import gguf
import numpy as np
import torch
import transformers
from hubserver import HubServer
from safetensors.torch import load_file
from transformers import AutoConfig, AutoModel

SEEDS = 3
"""Distinct weights per kind; repositories of a kind share them by hard link."""


@dataclass(frozen=True)
class Kind:
    """One kind of repository: its family and format, what the Hub lists for it, and what scoring does."""

    name: str
    share: int  # repositories per 100
    pipeline_tag: str
    outcome: str  # ok | failed
    reason: str = ""  # a word the failure reason contains
    library: str = "transformers"
    gated: bool = False


KINDS = (
    Kind("bert", 14, "fill-mask", "ok"),
    Kind("llama-sharded", 14, "text-generation", "ok"),
    Kind("qwen2", 10, "text-generation", "ok"),
    Kind("gpt2-bin", 10, "text-generation", "ok"),
    Kind("t5", 8, "text2text-generation", "ok"),
    Kind("vit", 8, "image-classification", "ok"),
    Kind("whisper", 6, "automatic-speech-recognition", "ok"),
    Kind("llama-gguf", 10, "text-generation", "ok", library="gguf"),
    Kind("mamba", 5, "text-generation", "failed", "unsupported model_type"),
    Kind("unknown-type", 3, "text-generation", "failed", "model_type"),
    Kind("truncated", 4, "fill-mask", "failed", "model.safetensors"),
    Kind("no-weights", 3, "text-generation", "failed", "no model.safetensors"),
    Kind("gated", 5, "text-generation", "failed", "gated", gated=True),
)
assert sum(kind.share for kind in KINDS) == 100
ORGS = 20


@dataclass
class Zoo:
    repos: dict[str, Path] = field(default_factory=dict)
    infos: dict[str, dict] = field(default_factory=dict)
    commits: dict[str, str] = field(default_factory=dict)
    outcomes: dict[str, Kind] = field(default_factory=dict)
    templates: dict[str, Path] = field(default_factory=dict)
    """The folder each repository's files are hard links to."""

    @property
    def gated(self) -> frozenset:
        return frozenset(repo for repo, kind in self.outcomes.items() if kind.gated)

    def server(self, **options) -> HubServer:
        """The tests' hub-like server over these repositories: their listing fields, commits and gating."""
        return HubServer(
            dict(self.repos), infos=self.infos, commits=self.commits, gated_repos=self.gated, **options
        )


def _symmetric_keys(model: torch.nn.Module, mix: float) -> None:
    """W_k ← mix·W_q + (1 − mix)·W_k in every layer: encoders that read as more symmetric (figures)."""
    with torch.no_grad():
        params = dict(model.named_parameters())
        for name, weight in params.items():
            for q, k in ((".query.", ".key."), (".q_proj.", ".k_proj.")):
                if q in name and name.replace(q, k) in params:
                    key = params[name.replace(q, k)]
                    key.copy_(mix * weight + (1 - mix) * key)


def _transformers(model_type: str, folder: Path, seed: int, sizes: dict, **save) -> None:
    torch.manual_seed(seed)
    model = AutoModel.from_config(AutoConfig.for_model(model_type, **sizes))
    if model_type in ("bert", "vit"):
        _symmetric_keys(model, (0.3, 0.6, 0.9)[seed % 3])
    model.save_pretrained(folder, **save)


def _gguf(folder: Path, seed: int) -> None:
    """A llama GGUF (Q8_0 q/k, float32 else), as a GGUF-only repository holds."""
    folder.mkdir(parents=True)
    write_llama_gguf(folder / "tiny.Q8_0.gguf", np.random.default_rng(seed), d=32, layers=2, vocab=64)


def write_llama_gguf(
    path: Path, rng: np.random.Generator, *, d: int, layers: int, vocab: int, ffn_tensors: bool = False
) -> None:
    """A llama GGUF of 4 query / 2 kv heads, its q/k in Q8_0 and the embedding (and, with
    ``ffn_tensors``, each layer's up projection) in float32."""
    heads, kv_heads, ffn = 4, 2, 2 * d
    writer = gguf.GGUFWriter(path, "llama")
    writer.add_block_count(layers)
    writer.add_embedding_length(d)
    writer.add_feed_forward_length(ffn)
    writer.add_head_count(heads)
    writer.add_head_count_kv(kv_heads)
    writer.add_vocab_size(vocab)
    writer.add_tensor("token_embd.weight", rng.standard_normal((vocab, d), dtype=np.float32))
    for i in range(layers):
        for short, rows in (("q", d), ("k", d * kv_heads // heads)):
            data = rng.standard_normal((rows, d), dtype=np.float32)
            writer.add_tensor(
                f"blk.{i}.attn_{short}.weight",
                gguf.quants.quantize(data, gguf.GGMLQuantizationType.Q8_0),
                raw_dtype=gguf.GGMLQuantizationType.Q8_0,
            )
        if ffn_tensors:
            writer.add_tensor(f"blk.{i}.ffn_up.weight", rng.standard_normal((ffn, d), dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


LLAMA = dict(hidden_size=32, num_attention_heads=4, num_key_value_heads=2, num_hidden_layers=2)
LLAMA.update(intermediate_size=64, vocab_size=64)
TOKENS = dict(bos_token_id=0, eos_token_id=0, pad_token_id=0)
BERT = dict(hidden_size=32, num_attention_heads=4, num_hidden_layers=2, intermediate_size=64, vocab_size=64)


def build_template(kind: str, folder: Path, seed: int) -> None:
    """One tiny model of ``kind`` in ``folder``, as its repository would hold it."""
    if kind in ("bert", "gated", "truncated"):
        _transformers("bert", folder, seed, BERT)
    elif kind == "llama-sharded":
        _transformers("llama", folder, seed, LLAMA, max_shard_size="20KB")
    elif kind == "qwen2":
        _transformers("qwen2", folder, seed, LLAMA)
    elif kind == "gpt2-bin":
        _transformers(
            "gpt2", folder, seed, dict(n_embd=32, n_head=4, n_layer=2, vocab_size=64, n_positions=64)
        )
        torch.save(load_file(folder / "model.safetensors"), folder / "pytorch_model.bin")
        (folder / "model.safetensors").unlink()
    elif kind == "t5":
        sizes = dict(d_model=32, d_kv=8, num_heads=4, num_layers=2, d_ff=64, vocab_size=64)
        _transformers("t5", folder, seed, sizes)
    elif kind == "vit":
        sizes = dict(BERT, image_size=16, patch_size=8)
        sizes.pop("vocab_size")
        _transformers("vit", folder, seed, sizes)
    elif kind == "whisper":
        sizes = dict(d_model=32, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4)
        sizes.update(decoder_attention_heads=4, encoder_ffn_dim=64, decoder_ffn_dim=64, vocab_size=64)
        sizes.update(max_source_positions=16, max_target_positions=16, num_mel_bins=8, **TOKENS)
        sizes.update(decoder_start_token_id=0, suppress_tokens=[], begin_suppress_tokens=[])
        _transformers("whisper", folder, seed, sizes)
    elif kind == "llama-gguf":
        _gguf(folder, seed)
    elif kind == "mamba":
        sizes = dict(hidden_size=32, num_hidden_layers=2, vocab_size=64, state_size=4)
        _transformers("mamba", folder, seed, sizes)
    elif kind == "unknown-type":
        _transformers("bert", folder, seed, BERT)
        config = json.loads((folder / "config.json").read_text())
        (folder / "config.json").write_text(json.dumps({**config, "model_type": "not_a_model_type"}))
    elif kind == "no-weights":
        folder.mkdir(parents=True)
        (folder / "config.json").write_text(json.dumps({"model_type": "llama", **LLAMA}))
        (folder / "README.md").write_text("weights to follow\n")
    else:
        raise ValueError(kind)
    if kind == "truncated":
        data = (folder / "model.safetensors").read_bytes()
        (folder / "model.safetensors").write_bytes(data[: len(data) // 2])


def _listing(kind: Kind, folder: Path) -> dict:
    """What the Hub's listing shows of a repository holding ``folder``'s files."""
    names = {path.name for path in folder.iterdir()}
    info: dict = {"pipeline_tag": kind.pipeline_tag, "library_name": kind.library}
    if "config.json" in names:
        config = json.loads((folder / "config.json").read_text())
        info["config"] = {
            "model_type": config.get("model_type"),
            "architectures": config.get("architectures"),
        }
    tensors = [p for p in folder.iterdir() if p.suffix == ".safetensors"]
    if tensors and kind.name != "truncated":
        total = 0
        for path in tensors:
            total += sum(t.numel() for t in load_file(path).values())
        info["safetensors"] = {"parameters": {"F32": total}, "total": total}
    if kind.library == "gguf":
        info["gguf"] = {"architecture": "llama", "total": 2 * 32 * 32 + 2 * 32 * 16 + 64 * 32}
    formats = {".safetensors": "safetensors", ".bin": "pytorch", ".gguf": "gguf"}
    tags = {kind.library, kind.pipeline_tag, "license:apache-2.0"}
    tags |= {formats[p.suffix] for p in folder.iterdir() if p.suffix in formats}
    tags |= {info["config"]["model_type"]} if info.get("config") else set()
    info["tags"] = sorted(tags)
    info["gated"] = "manual" if kind.gated else False
    return info


def make_zoo(root: Path, n: int, seed: int = 0) -> Zoo:
    """``n`` repositories under ``root`` (templates in ``root/templates``), ids ``org-NN/<kind>-NNNN``, kinds
    in the shares of ``KINDS``, downloads falling off as a power law (shuffled over the kinds)."""
    transformers.utils.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()
    rng = random.Random(seed)
    kinds = [kind for kind in KINDS for _ in range(kind.share)]
    order = [kinds[i * len(kinds) // n] for i in range(n)]
    rng.shuffle(order)
    downloads = [int(2_000_000 / (rank + 1) ** 1.2) + 10 for rank in range(n)]
    rng.shuffle(downloads)
    zoo = Zoo()
    templates: dict[tuple[str, int], tuple[Path, dict]] = {}
    for i, kind in enumerate(order):
        variant = i % SEEDS
        if (kind.name, variant) not in templates:
            folder = root / "templates" / f"{kind.name}-{variant}"
            build_template(kind.name, folder, variant)
            templates[kind.name, variant] = folder, _listing(kind, folder)
        template, info = templates[kind.name, variant]
        repo = f"org-{i % ORGS:02d}/{kind.name}-{i:04d}"
        folder = root / "repos" / repo
        folder.mkdir(parents=True)
        for path in template.iterdir():
            os.link(path, folder / path.name)
        zoo.repos[repo] = folder
        zoo.infos[repo] = {
            **info,
            "downloads": downloads[i],
            "likes": downloads[i] // 1000,
            "createdAt": f"2025-{1 + i % 12:02d}-{1 + i % 28:02d}T00:00:00.000Z",
        }
        zoo.commits[repo] = hashlib.sha1(f"{repo}@0".encode()).hexdigest()
        zoo.outcomes[repo] = kind
        zoo.templates[repo] = template
    return zoo
