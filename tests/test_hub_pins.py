"""Hub models pinned to a commit on their first resolution (attngeom.pipeline.hub_pins), on the emulated Hub
(tests/hubserver.py): later runs read the pin file, a moved main changes nothing until asked
(``update_pins``), and the records carry the commit they were computed from."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path

import pandas as pd
import pytest
import yaml
from hubserver import HubServer, pointed_at
from pipeline_support import ROOT, planned_jobs
from transformers import BertConfig, BertModel

from attngeom.errors import InputError
from attngeom.pipeline.hub_pins import hub_commit, pin_models, read_pins, record_pins, remember_resolved
from attngeom.pipeline.registry import build_registry

REPOS = ("org/enc-a", "org/enc-b")


def tiny_bert(folder: Path, seed: int = 0) -> Path:
    import torch

    torch.manual_seed(seed)
    config = BertConfig(
        hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64, vocab_size=50
    )
    BertModel(config).save_pretrained(folder)
    return folder


@pytest.fixture
def hub(tmp_path):
    server = HubServer({repo: tiny_bert(tmp_path / "repos" / repo) for repo in REPOS})
    with server.running(), pointed_at(server, tmp_path):
        yield server


def registry(*entries: dict) -> dict:
    return build_registry([{"objective": "bidirectional", **e} for e in entries], "results")


def test_the_first_resolution_pins_and_a_moved_main_changes_nothing_until_asked(hub, tmp_path):
    pins = tmp_path / "config" / "pins.yaml"
    own = "1" * 40
    models = registry({"id": "org/enc-a"}, {"id": "org/enc-b"}, {"id": "org/enc-c", "revision": own})
    first = pin_models(models, pins, resolve_now=True)
    assert first.pinned == {repo: hub.head(repo) for repo in REPOS} and first.unresolved == {}
    assert {m.id: m.revision for m in first.models.values()} == {
        "org/enc-a": hub.head("org/enc-a"),
        "org/enc-b": hub.head("org/enc-b"),
        "org/enc-c": own,  # the config's own revision is used as written, never pinned
    }
    assert not pins.exists()  # written when the run starts, not when the DAG is built
    record_pins(pins, first.pinned)
    assert read_pins(pins) == first.pinned

    before = hub.head("org/enc-a")
    moved = hub.add_revision("org/enc-a", tiny_bert(tmp_path / "moved", seed=1))
    assert moved != before
    again = pin_models(models, pins, resolve_now=True)
    assert again.pinned == {} and again.models == first.models

    updated = pin_models(models, pins, resolve_now=True, update=True)
    assert updated.pinned == {"org/enc-a": moved}
    assert {m.id: m.revision for m in updated.models.values()}["org/enc-a"] == moved


def test_an_unresolved_model_reads_main_and_says_why(hub, tmp_path):
    pins = tmp_path / "pins.yaml"
    offline = pin_models(registry({"id": "org/enc-a"}), pins, resolve_now=False)
    assert offline.pinned == {} and list(offline.unresolved) == ["org/enc-a"]
    assert next(iter(offline.models.values())).revision is None
    missing = pin_models(registry({"id": "org/absent"}, {"id": "org/enc-b"}), pins, resolve_now=True)
    assert list(missing.pinned) == ["org/enc-b"] and list(missing.unresolved) == ["org/absent"]


def test_a_hub_that_does_not_answer_is_asked_once_not_once_per_model(tmp_path):
    """No network (here: a closed port on 127.0.0.1): the first request fails without an answer, and the
    other models are not asked (each would wait alike; 151 of them took a dry run of the paper's config
    from 9 s to 38 s here, 98 s where connections time out)."""
    server = HubServer({})
    with server.running():
        pass  # the port is closed now: connections are refused
    asked = []

    def resolve(repo: str) -> str:
        asked.append(repo)
        return hub_commit(repo)

    models = registry(*({"id": f"org/enc-{i}"} for i in range(20)))
    with pointed_at(server, tmp_path):
        pinning = pin_models(models, tmp_path / "pins.yaml", resolve_now=True, resolve=resolve)
    assert len(asked) == 1 and pinning.pinned == {} and len(pinning.unresolved) == 20
    assert all(why.startswith("the Hub did not answer") for why in pinning.unresolved.values())


def test_commits_resolved_by_a_dry_run_are_cached_and_not_asked_again(hub, tmp_path):
    pins, cache = tmp_path / "config" / "pins.yaml", tmp_path / ".snakemake" / "attngeom" / "pins.yaml"
    models = registry({"id": "org/enc-a"}, {"id": "org/enc-b"})
    first = pin_models(models, pins, resolve_now=True, cache=cache)
    assert first.resolved == {repo: hub.head(repo) for repo in REPOS} and not cache.exists()
    remember_resolved(cache, first.resolved)  # what the workflow does when the DAG is built
    assert not pins.exists()

    def refuse(repo: str) -> str:
        raise AssertionError(f"{repo} asked of the Hub again")

    again = pin_models(models, pins, resolve_now=True, resolve=refuse, cache=cache)
    assert again.pinned == first.pinned and again.models == first.models and again.resolved == {}
    moved = hub.add_revision("org/enc-a", tiny_bert(tmp_path / "moved", seed=1))
    updated = pin_models(models, pins, resolve_now=True, update=True, cache=cache)  # asked: the Hub again
    assert updated.pinned["org/enc-a"] == moved
    cache.write_text("models: [damaged\n")  # only a cache: resolved again
    assert pin_models(models, pins, resolve_now=True, cache=cache).resolved["org/enc-a"] == moved


@pytest.mark.parametrize(
    "text,message",
    [
        ("models: [a, b]\n", "holds no `models:` mapping"),
        ("models: {org/x: main}\n", "org/x: 'main' is not a 40-digit commit sha"),
        (f"models: {{'../x': {'a' * 40}}}\n", "'../x' is not a Hub id"),
        ("models: {a: [\n", "cannot be read as YAML"),
    ],
)
def test_a_damaged_pin_file_is_one_line_naming_it(tmp_path, text, message):
    pins = tmp_path / "pins.yaml"
    pins.write_text(text)
    with pytest.raises(InputError, match="config: pins: ") as error:
        pin_models(registry({"id": "org/enc-a"}), pins, resolve_now=False)
    assert message in str(error.value) and "\n" not in str(error.value)


@pytest.mark.parametrize("kind", ["fifo", "folder"])
def test_a_pin_file_that_is_not_a_regular_file_is_refused_at_once(tmp_path, kind):
    """Issue 43, point 10: a FIFO in its place blocked the DAG's build (reading waits for a writer)."""
    pins = tmp_path / "pins.yaml"
    os.mkfifo(pins) if kind == "fifo" else pins.mkdir()
    outcome: list[BaseException | None] = []

    def read() -> None:
        try:
            pin_models(registry({"id": "org/enc-a"}), pins, resolve_now=False)
            outcome.append(None)
        except BaseException as err:  # handed to the test's thread
            outcome.append(err)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    reader.join(10)
    if reader.is_alive() and kind == "fifo":  # let the blocked reader go, then fail
        os.close(os.open(pins, os.O_WRONLY | os.O_NONBLOCK))
    assert outcome, "reading the pin file blocked"
    assert isinstance(outcome[0], InputError), outcome
    assert f"config: pins: {pins} is not a regular file" in str(outcome[0])


@pytest.mark.slow
def test_the_workflow_pins_on_its_first_run_and_rescores_only_when_asked(tmp_path):
    repo = tiny_bert(tmp_path / "repos" / "org" / "enc-a")
    server = HubServer({"org/enc-a": repo})
    work = tmp_path / "work"
    work.mkdir()
    model = {"id": "org/enc-a", "objective": "bidirectional"}
    (work / "c.yaml").write_text(yaml.safe_dump({"results": "results", "models": [model]}))
    target = "results/scores/org--enc-a.parquet"
    pins = work / "config" / "pins.yaml"

    def snakemake(*args: str) -> str:
        env = dict(
            os.environ, HF_ENDPOINT=server.url, HF_HOME=str(tmp_path / "hf"), HF_HUB_DISABLE_XET="1",
            ATTNGEOM_CACHE=str(tmp_path / "cache"), OMP_NUM_THREADS="1",
        )  # fmt: skip
        env.pop("HF_HUB_OFFLINE", None)
        command = [sys.executable, "-m", "snakemake", "--snakefile", str(ROOT / "workflow" / "Snakefile")]
        done = subprocess.run(
            [*command, target, *args, "--configfile", "c.yaml"],
            cwd=work, env=env, capture_output=True, text=True, timeout=900,
        )  # fmt: skip
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
        return done.stdout + done.stderr

    def recorded() -> set:
        return set(pd.read_parquet(work / target)["revision"])

    with server.running():
        first = server.head("org/enc-a")
        snakemake("-n")
        assert not pins.exists()  # a dry run resolves, and writes no pin file: the commit waits in a cache
        assert read_pins(work / ".snakemake" / "attngeom" / "resolved_pins.yaml") == {"org/enc-a": first}
        snakemake("--cores", "1")
        assert read_pins(pins) == {"org/enc-a": first} and recorded() == {first}

        moved = server.add_revision("org/enc-a", tiny_bert(tmp_path / "moved", seed=1))
        assert "Nothing to be done" in snakemake("-n")  # main moved: the pin holds
        # the new commit: its source record (rule model_source) and its scores again, nothing else
        assert [rule for rule, _, _ in planned_jobs(snakemake("-n", "--config", "update_pins=True"))] == [
            "model_source",
            "score",
        ]
        snakemake("--cores", "1", "--config", "update_pins=True")
        assert read_pins(pins) == {"org/enc-a": moved} and recorded() == {moved}
