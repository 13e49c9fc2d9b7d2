"""Sources over files read by range: what to fetch, when, and on which threads.

The architecture map asks for tensors one at a time. The first layer's tensors are fetched as asked;
when the map comes back for the same tensor of another layer (``layers.1.q_proj`` after
``layers.0.q_proj``), every layer's instance of every tensor asked for so far is planned at once,
adjacent byte ranges merged into one request (``MAX_REQUEST`` at most), and handed in layer order to the
standard library's thread pool, ``WORKERS`` requests at a time (so a run that stops early waits for few).
"""

from __future__ import annotations

import contextlib
import re
import threading
from collections import defaultdict, deque
from collections.abc import Callable, Iterable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np
import torch

from ..errors import InputError
from . import gguf
from .base import ModelConfig, WeightSource
from .ranged import RemoteFile, read_gguf_table, read_safetensors_table

WORKERS = 8
"""Ranged requests in flight at once (besides the one the caller waits for)."""
MAX_REQUEST = 64 << 20
"""Adjacent tensors are merged into one request up to this many bytes."""


@dataclass(eq=False)
class _Batch:
    """Tensors that lie back to back in one file, fetched with one request."""

    file: RemoteFile
    names: list[str]
    future: Future | None = None


def _pattern(name: str) -> str:
    return re.sub(r"\d+", "#", name)


def _numbers(name: str) -> list[int]:
    return [int(n) for n in re.findall(r"\d+", name)]


class Prefetcher:
    """Tensor name → its remote file; fetches what is asked for and, once layers repeat, all of their kind.

    ``read_tables(files)`` makes sure those files' tensor tables are read.
    """

    def __init__(
        self, file_of: dict[str, RemoteFile], read_tables: Callable[[Iterable[RemoteFile]], None]
    ) -> None:
        self._file_of = file_of
        self._read_tables = read_tables
        self._instances: dict[str, list[str]] = defaultdict(list)
        for name in sorted(file_of, key=_numbers):
            self._instances[_pattern(name)].append(name)
        self._seen: set[str] = set()
        self._unplanned: list[str] = []
        self._pool = ThreadPoolExecutor(WORKERS, thread_name_prefix="attngeom-range")
        self._lock = threading.RLock()  # a callback may run inside _start, in the same thread
        self._queued: deque[_Batch] = deque()
        self._running = 0
        self._batch_of: dict[tuple[RemoteFile, str], _Batch] = {}

    def tensor(self, name: str) -> torch.Tensor:
        """A tensor's value, downloaded first if need be. On an error nothing further is fetched: the
        requests in flight end (their partial cache entries removed) before the error reaches the caller,
        so no thread writes to the cache after the scoring has stopped."""
        try:
            return self._tensor(name)
        except BaseException:
            self._stop()
            raise

    def close(self) -> None:
        """Nothing further fetched; the requests in flight end first."""
        self._stop()

    def _stop(self) -> None:
        with self._lock:
            self._queued.clear()
            self._batch_of.clear()
        self._pool.shutdown(wait=True, cancel_futures=True)

    def _tensor(self, name: str) -> torch.Tensor:
        pattern = _pattern(name)
        if pattern in self._seen:
            self._plan()
        else:
            self._seen.add(pattern)
            self._unplanned.append(pattern)
        file = self._file_of[name]
        self._read_tables([file])
        if name not in file.table:
            raise InputError(
                f"{file}: the index lists {name} but the file's header does not; corrupted upload?"
            )
        self._wait(file, name)
        return file.tensor(name)

    def _wait(self, file: RemoteFile, name: str) -> None:
        """Until ``name`` is cached: fetched here and now, unless a pool thread has started on it."""
        if file.cached(name):
            return
        with self._lock:
            batch = self._batch_of.pop((file, name), None)
            if batch is not None and batch.future is None:
                self._queued.remove(batch)
        if batch is None or batch.future is None:
            file.fetch(batch.names if batch else [name])
        else:
            batch.future.result()

    def _plan(self) -> None:
        """Queue every layer's instance of the tensors asked for since the last plan, in layer order."""
        if not self._unplanned:
            return
        names = [n for pattern in self._unplanned for n in self._instances[pattern]]
        self._unplanned.clear()
        self._read_tables({self._file_of[n] for n in names})
        by_file: dict[RemoteFile, list[str]] = defaultdict(list)
        for name in names:
            file = self._file_of[name]
            if name in file.table and (file, name) not in self._batch_of and not file.cached(name):
                by_file[file].append(name)
        batches = [batch for file, todo in by_file.items() for batch in _coalesce(file, todo)]
        batches.sort(key=lambda batch: _numbers(batch.names[0]))  # the map's next request first
        with self._lock:
            for batch in batches:
                self._queued.append(batch)
                self._batch_of.update(((batch.file, name), batch) for name in batch.names)
        self._start()

    def _start(self) -> None:
        """Hand queued batches to the pool, at most ``WORKERS`` at a time."""
        with self._lock:
            while self._running < WORKERS and self._queued:
                batch = self._queued.popleft()
                self._running += 1
                batch.future = self._pool.submit(batch.file.fetch, batch.names)
                batch.future.add_done_callback(self._finished)

    def _finished(self, _: Future) -> None:
        with self._lock:
            self._running -= 1
        with contextlib.suppress(RuntimeError):  # stopped, or the interpreter is exiting: start nothing new
            self._start()


def _coalesce(file: RemoteFile, names: list[str]) -> list[_Batch]:
    """``names`` as runs of tensors that lie back to back in ``file``, each run at most ``MAX_REQUEST``."""
    batches: list[_Batch] = []
    for name in sorted(names, key=lambda n: file.table[n].start):
        entry = file.table[name]
        last = batches[-1] if batches else None
        if (
            last
            and file.table[last.names[-1]].end == entry.start
            and entry.end - file.table[last.names[0]].start <= MAX_REQUEST
        ):
            last.names.append(name)
        else:
            batches.append(_Batch(file, [name]))
    return batches


def read_safetensors_tables(todo: Iterable[RemoteFile]) -> None:
    """The tables of several files, their headers read at once."""
    todo = [f for f in todo if not f.table_ready]
    if len(todo) <= 1:
        for file in todo:
            read_safetensors_table(file)
        return
    with ThreadPoolExecutor(min(WORKERS, len(todo))) as pool:
        list(pool.map(read_safetensors_table, todo))


def safetensors_source(
    files_of: dict[str, RemoteFile],
    weight_map: dict[str, str],
    config: ModelConfig,
    *,
    model_id: str,
    revision: str,
    n_params: int | None,
) -> WeightSource:
    """A safetensors checkpoint read by range: ``files_of`` maps each shard name to its remote file."""
    prefetch = Prefetcher(
        {name: files_of[shard] for name, shard in weight_map.items()}, read_safetensors_tables
    )
    return WeightSource(
        model_id=model_id,
        description=model_id,
        config=config,
        names=weight_map,
        load=prefetch.tensor,
        revision=revision,
        n_params=n_params,
        close=prefetch.close,
    )


def gguf_source(file: RemoteFile, *, model_id: str, revision: str) -> WeightSource:
    """A GGUF file read by range: its header, then the q/k tensors' raw bytes."""
    header = read_gguf_table(file)
    prefetch = Prefetcher(dict.fromkeys(file.table, file), lambda _: None)

    def read(info: gguf.TensorInfo) -> np.ndarray:
        return prefetch.tensor(info.name).numpy()

    return gguf.gguf_weights(
        header, read, model_id=model_id, description=model_id, revision=revision, close=prefetch.close
    )
