"""A run folder: what it holds, whose settings it was trained with, and whether a new call may resume it.
Which runs are compared with which is ``attngeom.runstats.pairing``.

The folder's ``config.yaml`` is the one record of what a run trains (read by ``RunInfo.read``);
``corpus.json`` records the SHA-256 of the tokenizer and of the token stream it was trained on, and
``code.json`` the hash of the training code that started it (``attngeom.provenance``). A run is resumed
only with the same settings and the same data; anything else is refused, or, when asked (``restart``), the
old folder is moved aside to ``<folder>.replaced-<UTC time>``: never overwritten. ``if-changed`` (the
pipeline's choice) also trains afresh when the training code changed since the run started, and a finished
run whose recorded scores other scoring code computed (what ``snakemake --forcerun train`` is for). A folder
is locked while a process trains it (``RunLock``): a second trainer, or a restart, waits for nobody and is
refused in one line.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import math
import re
import shutil
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Literal

import numpy as np
import yaml

from ..files import write_text
from ..provenance import code_hash
from ..version import __version__
from .bookkeeping import other_scoring_code, read_log, read_loss_log
from .config import (
    PRESETS,
    ConfigError,
    TrainConfig,
    dataset_label,
    make_config,
    read_config_file,
)
from .corpus import Corpus
from .inits import ARM, ARMS
from .recipes import AUTHORS_CODE, NOT_OFFERED, PAPER, PAPER_CORPORA
from .tokenizer import BERT_UNCASED_SHA256


@dataclass(frozen=True)
class DataFacts:
    """How much data a run sees: its corpus' documents, the tokens of an update ([CLS] and [SEP] counted,
    padding not; each document cut to ``seq_len``) and the passes over the corpus an update makes; with
    ``updates``, the updates the run made (its loss log's last step), so that totals are the run's own,
    not those of the configured schedule."""

    documents: int
    tokens_per_update: float
    passes_per_update: float
    updates: int | None = None

    @property
    def passes(self) -> float | None:
        return None if self.updates is None else self.updates * self.passes_per_update

    def record(self) -> dict[str, float]:
        """What ``corpus.json`` keeps (the updates made are the loss log's)."""
        return {
            "documents": self.documents,
            "tokens_per_update": self.tokens_per_update,
            "passes_per_update": self.passes_per_update,
        }


def corpus_facts(corpus: Corpus, config: TrainConfig) -> DataFacts:
    """The ``DataFacts`` of ``config``'s updates over ``corpus`` (before any update is made)."""
    _, lengths = corpus.document_spans()
    if config.batch_documents:
        per_update = config.batch_documents * float(np.minimum(lengths + 2, config.seq_len).mean())
        passes = config.batch_documents / len(lengths)
    else:
        per_update = config.micro_batch_rows * config.grad_accum * config.seq_len
        passes = per_update / len(corpus.tokens)
    return DataFacts(len(lengths), per_update, passes)


def paper_differences(
    config: TrainConfig, data: DataFacts | None = None, tokenizer_sha256: str | None = None
) -> list[str]:
    """Every way ``config`` computes something other than the paper's text and the authors' code, as
    ``name=value (paper: …; authors' code: …)``; ``data`` adds the corpus, tokens per update and passes
    over the data (in the updates the run made where ``data.updates`` says, else as a rate);
    ``tokenizer_sha256`` tells a tokenizer file that is BERT's uncased vocabulary from one that is not.
    Where the two agree with the run, nothing is listed."""
    settings = config.to_dict()
    out = [
        f"{name}={settings[name]} (paper: {value})"
        for name, value in PAPER.items()
        if settings[name] != value and name != "batch_documents"
    ]
    out += _model_size(config)
    if config.batch_documents is None:
        out.append(
            f"batch_documents=None: an update is {config.micro_batch_rows} × {config.grad_accum} rows of "
            f"{config.seq_len} tokens cut from the token stream (paper: 256 documents, one a row)"
        )
    elif config.batch_documents != PAPER["batch_documents"]:
        out.append(f"batch_documents={config.batch_documents} (paper: 256)")
    code = {k: v for k, v in AUTHORS_CODE.items() if k not in PAPER}
    if not config.uses_masking:
        code.pop("masking")
    if config.objective != "decoder":
        code.pop("decoder_loss")
    if tokenizer_sha256 == BERT_UNCASED_SHA256:
        code.pop("tokenizer")  # a file holding BERT's uncased vocabulary is the authors' tokenizer
    out += [f"{k}={settings[k]} (authors' code: {v})" for k, v in code.items() if settings[k] != v]
    if ARM[config.init].papers_name is None:
        theirs = "; ".join(f"{a.papers_name} = {a.name}, {a.how}" for a in ARMS if a.papers_name)
        out.append(f"init={config.init} (authors' code: {theirs})")
    named = config.dataset.split("@")[0]
    if named in PAPER_CORPORA and config.character_spacing != PAPER_CORPORA[named]:
        out.append(
            f"character_spacing={config.character_spacing} (authors' code: {PAPER_CORPORA[named]} for {named})"
        )
    if named not in PAPER_CORPORA:
        out.append(
            f"dataset={config.dataset}, character_spacing={config.character_spacing} (paper: Wikipedia and "
            "RedPajama spaced out character by character, Jigsaw in word pieces)"
        )
    if config.batch_documents and config.pack_documents:
        out.append(
            "pack_documents=True (authors' code: one document per padded row; the same losses and "
            "gradients, tests/test_training_recipe.py)"
        )
    out += [f"{name}: {what}" for name, what in NOT_OFFERED.items()]
    if data:
        out += _data_differences(data)
    return out


def _model_size(config: TrainConfig) -> list[str]:
    """Sizes set other than the paper's model of this depth (Table S1: BERT-mini, -base, -large)."""
    if config.n_layers not in PRESETS:
        return [f"n_layers={config.n_layers} (paper: 4, 12 or 24 layers)"]
    names = ("hidden_size", "n_heads", "intermediate_size")
    settings = config.to_dict()
    return [
        f"{name}={settings[name]} (paper: {size} at {config.n_layers} layers)"
        for name, size in zip(names, PRESETS[config.n_layers], strict=True)
        if settings[name] is not None and settings[name] != size
    ]


def _data_differences(data: DataFacts) -> list[str]:
    """The corpus' size, tokens per update and passes over the data, beside the paper's."""
    passes = (
        f"passes over the data: {data.passes:,.1f} in the {data.updates:,} updates made"
        if data.updates is not None
        else f"passes over the data: {1000 * data.passes_per_update:,.2f} every 1,000 updates"
    )
    tokens = (
        [
            f"tokens per update ≈ {data.tokens_per_update:,.0f} (paper: up to 256 × 512 = 131,072; "
            "Wikipedia and RedPajama, spaced out, fill their rows)"
        ]
        if math.isfinite(data.tokens_per_update)
        else []
    )
    return [
        *tokens,
        f"{passes}, over {data.documents:,} documents (paper: 200,000 × 256 = 51.2M documents drawn)",
    ]


def write_config(
    config: TrainConfig, path: Path, data: DataFacts | None = None, tokenizer: str | None = None
) -> None:
    """The run's settings, and how they differ from the paper's (``differs_from_paper``)."""
    record = {**config.to_dict(), "differs_from_paper": paper_differences(config, data, tokenizer)}
    write_text(path, yaml.safe_dump(record, sort_keys=False, allow_unicode=True))


Restart = Literal["never", "if-changed", "always"]
RESTART_CHOICES: tuple[Restart, ...] = ("never", "if-changed", "always")
"""``never``: a folder holding a run with other settings is an error. ``if-changed``: such a run is moved
aside and a new one starts (same settings resume). ``always``: any earlier run is moved aside."""

PROGRESS = ("checkpoint", "loss.parquet", "scores.parquet", "final")
"""What a run leaves once it has really started; a folder with none of these holds no run."""

TEMPORARY = re.compile(
    r"\.(state|previous|loss|scores|config|corpus|code)\.[a-z0-9_]+\.tmp\.(pt|parquet|yaml|json)"
    r"|\.final\.[a-z0-9_]+\.tmp"
)
"""The temporaries ``attngeom.files`` writes a run folder's files through (``.<stem>.<random>.tmp<suffix>``)."""
LOCK = ".lock"
SUBSTITUTE_KEY = "instead_of_the_papers_corpus"
"""corpus.json's line saying what was read instead of the paper's snapshot (``DocumentSource.substitute``)."""

logger = logging.getLogger(__name__)


class RunLock:
    """An OS lock (``flock``) on ``<run folder>/.lock``, taken when made, held while a process trains the
    run: the OS releases it when the process ends, however it ends. A second trainer, or a restart that
    would move the folder aside under a live run, is refused in one line. A folder it made for the lock
    goes again when released with nothing else in it (a call that fails first leaves nothing in the way)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.made = not path.exists()
        path.mkdir(parents=True, exist_ok=True)
        handle = open(path / LOCK, "a+", encoding="utf-8")  # noqa: SIM115 (held until release)
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            handle.close()
            raise ConfigError(
                f"{path} is being trained by another process: a run folder trains in one process at a "
                "time; wait for it to end (or stop it), or use another --out folder"
            ) from None
        self.handle: IO[str] | None = handle

    def release(self) -> None:
        if self.handle is None:
            return
        if self.made and [entry.name for entry in self.path.iterdir()] == [LOCK]:
            with contextlib.suppress(OSError):  # another process may lock it anew meanwhile: it then stays
                (self.path / LOCK).unlink()
                self.path.rmdir()
        self.handle.close()
        self.handle = None

    def __enter__(self) -> RunLock:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


@dataclass(frozen=True)
class RunFolder:
    path: Path

    @property
    def config(self) -> Path:
        return self.path / "config.yaml"

    @property
    def corpus(self) -> Path:
        return self.path / "corpus.json"

    @property
    def code(self) -> Path:
        return self.path / "code.json"

    @property
    def checkpoint(self) -> Path:
        return self.path / "checkpoint" / "state.pt"

    @property
    def loss(self) -> Path:
        return self.path / "loss.parquet"

    @property
    def scores(self) -> Path:
        return self.path / "scores.parquet"

    @property
    def final(self) -> Path:
        return self.path / "final"

    def holds_a_run(self) -> bool:
        return any((self.path / name).exists() for name in PROGRESS)

    def recorded_config(self) -> TrainConfig | None:
        """The settings the folder's run was trained with; None when unreadable (e.g. an older attngeom)."""
        try:
            return make_config(read_config_file(self.config))
        except ConfigError:
            return None

    def claim(self, config: TrainConfig, restart: Restart) -> RunLock:
        """Before any data is read: lock the folder (``RunLock``, returned held), make way for a run of
        ``config`` (or its resumption), and remove what a killed process left half-written."""
        if restart not in RESTART_CHOICES:
            raise ConfigError(f"restart={restart!r}: choose one of {RESTART_CHOICES}")
        if self.path.exists() and not self.path.is_dir():
            raise ConfigError(f"--out {self.path} is a file, not a run folder")
        lock = RunLock(self.path)
        try:
            if self.holds_a_run() and self._moves_aside(config, restart):
                self._move_aside()
                lock.release()
                lock = RunLock(self.path)
            self.remove_stale_temporaries()
        except BaseException:
            lock.release()
            raise
        return lock

    def _moves_aside(self, config: TrainConfig, restart: Restart) -> bool:
        """Whether the run the folder holds makes way for a new one (else it resumes, or is an error)."""
        recorded = self.recorded_config()
        # the attention kernel apart: each computes the same attention (a run started alone on a GPU, in
        # blocks, resumes stacked or on a CPU, in dense); the folder keeps the one it started with
        same = recorded is not None and replace(recorded, attention=config.attention) == config
        if restart == "if-changed" and same and self.recorded_code() != code_hash("training"):
            logger.warning("attngeom: the training code changed since the run in %s started", self.path)
            same = False
        if restart == "if-changed" and same and self.finished_with_other_scores(config.steps):
            logger.warning("attngeom: the run in %s recorded scores of other scoring code", self.path)
            same = False
        if restart == "always" or (restart == "if-changed" and not same):
            return True
        if not same:
            raise ConfigError(
                f"{self.path} holds a training run with other settings ({self._difference(config)}); "
                "pass --restart to move it aside and train afresh, or use another --out folder"
            )
        return False

    def remove_stale_temporaries(self) -> None:
        """The temporaries of a process killed while it wrote (SIGKILL leaves them; any other end removes
        its own): only names ``attngeom.files`` gives the folder's own files, nothing else."""
        for folder in (self.path, self.path / "checkpoint"):
            for entry in folder.iterdir() if folder.is_dir() else ():
                if not TEMPORARY.fullmatch(entry.name) or entry.is_symlink():
                    continue
                if entry.is_dir():
                    shutil.rmtree(entry, ignore_errors=True)
                else:
                    entry.unlink(missing_ok=True)

    def begin(self, config: TrainConfig, corpus: Corpus) -> None:
        """Once the run really starts: resuming needs the data the run was trained on; a fresh run
        records its settings and data."""
        data = {"tokenizer_sha256": corpus.tokenizer_sha256, "tokens_sha256": corpus.tokens_sha256}
        if self.holds_a_run():
            if not self.corpus.is_file():
                raise ConfigError(
                    f"{self.path} records no {self.corpus.name} (made by an earlier attngeom), so resuming "
                    "it on today's token cache could change its data; pass --restart to train afresh"
                )
            recorded = json.loads(self.corpus.read_text())
            changed = [name for name, value in data.items() if recorded.get(name) != value]
            if changed:
                raise ConfigError(
                    f"{self.path} was trained on other data than the corpus cache {corpus.path} now holds "
                    f"({' and '.join(changed)} differ; the token cache was rebuilt or the corpus "
                    "changed); pass --restart to move the run aside and train afresh"
                )
            return
        substitute = corpus.source.substitute
        facts = corpus_facts(corpus, config)
        recorded = data | facts.record() | ({SUBSTITUTE_KEY: substitute} if substitute else {})
        write_text(self.corpus, json.dumps(recorded, indent=1) + "\n")
        code = {"code_hash": code_hash("training"), "attngeom_version": __version__}
        write_text(self.code, json.dumps(code, indent=1) + "\n")
        write_config(config, self.config, facts, corpus.tokenizer_sha256)

    def recorded_code(self) -> str | None:
        """The hash of the training code that started the folder's run; None if unrecorded."""
        try:
            return json.loads(self.code.read_text()).get("code_hash")
        except (OSError, ValueError, AttributeError):
            return None

    def finished_with_other_scores(self, steps: int) -> bool:
        """Whether the folder's run reached step ``steps`` and recorded scores (``code_hash`` of each row)
        that other scoring code than this attngeom's computed: only training it again rescores its earlier
        steps. An unfinished run resumes instead, its rows of either code each marked so."""
        if not self.scores.is_file():
            return False
        rows = read_log(self.scores)
        finished = len(rows) > 0 and rows["step"].max() >= steps
        return finished and bool(other_scoring_code(rows, code_hash("scoring")).any())

    def _difference(self, config: TrainConfig) -> str:
        recorded = self.recorded_config()
        if recorded is None:
            return f"{self.config.name} is missing or unreadable"
        old, new = recorded.to_dict(), config.to_dict()
        return ", ".join(f"{k}: {old[k]!r} → {new[k]!r}" for k in new if old[k] != new[k])

    def _move_aside(self) -> None:
        stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
        target = self.path.with_name(f"{self.path.name}.replaced-{stamp}")
        count = 1
        while target.exists():
            count += 1
            target = self.path.with_name(f"{self.path.name}.replaced-{stamp}-{count}")
        self.path.rename(target)
        logger.warning("attngeom: the earlier run in %s was moved aside to %s", self.path, target)


# ---------------------------------------------------------------- identity


@dataclass(frozen=True)
class RunInfo:
    """Who a run is: its folder's name, the settings in its config.yaml and, read from the folder's
    corpus.json, how much data its updates saw, which tokenizer it used and what it read in place of the
    paper's corpus."""

    name: str
    config: TrainConfig
    data: DataFacts | None = None
    tokenizer_sha256: str | None = None
    tokens_sha256: str | None = None
    """The digest of the token ids the run read (corpus.json): what its dataset and tokenizer made."""
    substitute: str = ""
    """What the run streamed instead of the paper's snapshot of its corpus (``instead_of_the_papers_corpus``
    in corpus.json), "" where it read the corpus it names."""

    @classmethod
    def read(cls, folder: str | Path) -> RunInfo:
        folder = RunFolder(Path(folder))
        config = folder.recorded_config()
        if config is None:
            raise ConfigError(f"{folder.config} is missing or is not a training config")
        corpus = _json_or_empty(folder.corpus)
        return cls(
            folder.path.name,
            config,
            _data_facts(folder, corpus),
            corpus.get("tokenizer_sha256"),
            corpus.get("tokens_sha256"),
            str(corpus.get(SUBSTITUTE_KEY) or ""),
        )

    def labels(self) -> dict[str, object]:
        """The columns that tag a run's rows in tables and figures."""
        differences = paper_differences(self.config, self.data, self.tokenizer_sha256)
        return {
            "run": self.name,
            "dataset": dataset_label(self.config.dataset),
            "layers": self.config.n_layers,
            "objective": self.config.objective,
            "decoder_loss": self.config.decoder_loss if self.config.objective == "decoder" else "",
            "init": self.config.init,
            "characters": self.config.character_spacing,
            "reg_weight": self.config.reg_weight,
            "seed": self.config.seed,
            "differs_from_paper": "; ".join(differences) or "none",
        }


def _json_or_empty(path: Path) -> dict:
    try:
        found = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return found if isinstance(found, dict) else {}


OLD_PASSES = re.compile(r"passes over the data: ([\d,.]+) in ([\d,]+) updates of ([\d,]+) documents")
"""How config.yaml gave the passes before corpus.json kept the data's facts (planned updates, not made)."""


def _data_facts(folder: RunFolder, corpus: dict) -> DataFacts | None:
    """The run's ``DataFacts`` with the updates it made and the tokens an update it measured (its loss log);
    the corpus' size and passes per update from ``corpus.json``, or, for a run recorded before that file kept
    them, from its config.yaml's own passes entry."""
    if "passes_per_update" in corpus:
        documents, passes_per_update = int(corpus["documents"]), float(corpus["passes_per_update"])
        tokens_per_update = float(corpus["tokens_per_update"])
    else:
        recorded = yaml.safe_load(folder.config.read_text()).get("differs_from_paper") or []
        found = next((m for line in recorded if (m := OLD_PASSES.search(str(line)))), None)
        if found is None:
            return None
        passes, planned, documents = (float(g.replace(",", "")) for g in found.groups())
        documents, passes_per_update, tokens_per_update = int(documents), passes / planned, math.nan
    if not folder.loss.is_file():
        return DataFacts(documents, tokens_per_update, passes_per_update)
    log = read_loss_log(folder.loss)
    if log.empty:
        return DataFacts(documents, tokens_per_update, passes_per_update, 0)
    measured = float(log["update_tokens"].mean())
    return DataFacts(documents, measured, passes_per_update, int(log["step"].max()))
