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
import re
import shutil
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Literal

import yaml

from ..files import write_text
from ..provenance import code_hash
from ..version import __version__
from .bookkeeping import other_scoring_code, read_log
from .config import (
    ConfigError,
    TrainConfig,
    dataset_label,
    make_config,
    read_config_file,
)
from .corpus import Corpus, corpus_facts
from .documents import SUBSTITUTES, split_revision
from .recipes import AUTHORS_CODE, NOT_OFFERED, PAPER, PAPER_CORPORA


def paper_differences(config: TrainConfig, data: Mapping[str, float] | None = None) -> list[str]:
    """Every way ``config`` computes something other than the paper's text and the authors' code, as
    ``name=value (paper: …; authors' code: …)``; ``data`` (``corpus_facts``) adds the corpus, tokens per
    update and passes over the data. Where the two agree with the run, nothing is listed."""
    settings = config.to_dict()
    out = [
        f"{name}={settings[name]} (paper: {value})"
        for name, value in PAPER.items()
        if settings[name] != value and name != "batch_documents"
    ]
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
    out += [f"{k}={settings[k]} (authors' code: {v})" for k, v in code.items() if settings[k] != v]
    if config.init not in ("random", "torch_default_symmetric"):
        out.append(
            f"init={config.init} (authors' code: random = BERT's N(0, 0.02); symmetric = "
            "torch_default_symmetric, fresh nn.Linear q/k/v then W_q = W_k)"
        )
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
        out += [
            f"tokens per update ≈ {data['tokens_per_update']:,.0f} (paper: up to 256 × 512 = 131,072; "
            "Wikipedia and RedPajama, spaced out, fill their rows)",
            f"passes over the data: {data['passes']:,.1f} in {config.steps:,} updates of "
            f"{data['documents']:,.0f} documents (paper: 200,000 × 256 = 51.2M documents drawn)",
        ]
    return out


def write_config(config: TrainConfig, path: Path, data: Mapping[str, float] | None = None) -> None:
    """The run's settings, and how they differ from the paper's (``differs_from_paper``)."""
    record = {**config.to_dict(), "differs_from_paper": paper_differences(config, data)}
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
        same = self.recorded_config() == config
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
        substitute = SUBSTITUTES.get(split_revision(config.dataset)[0])
        recorded = data | ({"instead_of_the_papers_corpus": substitute} if substitute else {})
        write_text(self.corpus, json.dumps(recorded, indent=1) + "\n")
        code = {"code_hash": code_hash("training"), "attngeom_version": __version__}
        write_text(self.code, json.dumps(code, indent=1) + "\n")
        write_config(config, self.config, corpus_facts(corpus, config))

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
        return finished and bool(other_scoring_code(rows, code_hash("scores")).any())

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
    """Who a run is: its folder's name and the settings in its config.yaml."""

    name: str
    config: TrainConfig

    @classmethod
    def read(cls, folder: str | Path) -> RunInfo:
        folder = RunFolder(Path(folder))
        config = folder.recorded_config()
        if config is None:
            raise ConfigError(f"{folder.config} is missing or is not a training config")
        return cls(folder.path.name, config)

    def labels(self) -> dict[str, object]:
        """The columns that tag a run's rows in tables and figures."""
        return {
            "run": self.name,
            "dataset": dataset_label(self.config.dataset),
            "layers": self.config.n_layers,
            "objective": self.config.objective,
            "init": self.config.init,
            "characters": self.config.character_spacing,
            "reg_weight": self.config.reg_weight,
            "seed": self.config.seed,
            "differs_from_paper": "; ".join(paper_differences(self.config)) or "none",
        }
