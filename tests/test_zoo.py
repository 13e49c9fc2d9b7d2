"""Zoo queries against the hub-like server: the listing and its filters, the pinned list, the registry
entries, the pinned commit being the one scored, and batches that record every model whatever happens."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import yaml
from hubserver import pointed_at
from pipeline_support import ROOT
from zoo_repos import KINDS, make_zoo

from attngeom.cli import main
from attngeom.errors import InputError, reason_kind
from attngeom.pipeline import batches, outcome, zoo
from attngeom.pipeline.registry import build_registry, score_resources
from attngeom.records import read_scores
from attngeom.report.summary import collect, model_records

N = 60


@pytest.fixture(scope="module")
def emulated(tmp_path_factory):
    root = tmp_path_factory.mktemp("zoo")
    return make_zoo(root, N)


@pytest.fixture
def hub(emulated, tmp_path):
    server = emulated.server(page_size=7)  # several pages for every query
    with server.running(), pointed_at(server, tmp_path):
        yield server


def listed(query: dict) -> list[dict]:
    return zoo.list_models(zoo.Zoo.from_config({"name": "t", **query}).query)


def expected(emulated, keep, key="downloads", limit=None) -> list[str]:
    """The ids a query should give, from the emulated listing fields directly (descending ``key``)."""
    infos = emulated.infos
    ids = sorted((r for r in infos if keep(r, infos[r])), key=lambda r: (-infos[r][key], r))
    return ids[:limit]


# ---------------------------------------------------------------- the listing


@pytest.mark.parametrize(
    "query,keep",
    [
        ({"limit": 25}, lambda r, i: True),
        ({"limit": 500, "pipeline_tag": "fill-mask"}, lambda r, i: i["pipeline_tag"] == "fill-mask"),
        ({"limit": 500, "library": "gguf"}, lambda r, i: i["library_name"] == "gguf"),
        ({"limit": 500, "author": "org-03"}, lambda r, i: r.startswith("org-03/")),
        (
            {"limit": 500, "tags": ["safetensors", "llama"]},
            lambda r, i: {"safetensors", "llama"} <= set(i["tags"]),
        ),
        ({"limit": 500, "search": "t5-"}, lambda r, i: "t5-" in r),
        ({"limit": 500, "gated": False}, lambda r, i: not i["gated"]),
        (
            {"limit": 500, "num_parameters": "min:30K"},
            lambda r, i: (i.get("safetensors") or {}).get("total", 0) >= 3e4,
        ),
        ({"limit": 500, "min_downloads": 20000}, lambda r, i: i["downloads"] >= 20000),
    ],
    ids=lambda v: ",".join(f"{k}={w}" for k, w in v.items()) if isinstance(v, dict) else "",
)
def test_a_query_lists_what_the_hub_holds_for_it_page_after_page(emulated, hub, query, keep):
    models = listed(query)
    assert [m["id"] for m in models] == expected(emulated, keep, limit=query["limit"])
    assert len(models) > 0
    pages = [path for _, path in hub.requests if path.startswith("/api/models")]
    assert len(pages) >= min(len(models), query["limit"]) // 7


def test_min_downloads_under_another_sort_reads_every_page(emulated, hub):
    models = listed({"limit": 500, "min_downloads": 20000, "sort": "likes"})
    assert [m["id"] for m in models] == expected(emulated, lambda r, i: i["downloads"] >= 20000, key="likes")


def test_sorted_by_downloads_the_listing_stops_at_the_first_model_below_min_downloads(emulated, hub):
    listed({"limit": 500, "min_downloads": 100_000})
    pages = [path for _, path in hub.requests if path.startswith("/api/models")]
    assert len(pages) < N / 7


def test_each_model_is_pinned_to_its_commit_with_what_the_hub_says_of_it(emulated, hub):
    models = {m["id"]: m for m in listed({"limit": N})}
    assert set(models) == set(emulated.repos)
    for repo, model in models.items():
        kind = emulated.outcomes[repo]
        assert model["revision"] == emulated.commits[repo]
        assert model["pipeline_tag"] == kind.pipeline_tag and model["gated"] == kind.gated
        weights = {"gpt2-bin": "bin", "llama-gguf": "gguf", "no-weights": "none"}.get(
            kind.name, "safetensors"
        )
        assert model["weights"] == weights
        assert model.get("file") == ("tiny.Q8_0.gguf" if weights == "gguf" else None)
        assert model["model_type"] == (emulated.infos[repo].get("config") or {}).get("model_type", "llama")


def test_the_gguf_file_scored_is_the_highest_precision_one():
    names = ["m.Q4_K_M.gguf", "m.Q8_0.gguf", "m-f16.gguf", "mmproj-m-f32.gguf", "big-00001-of-00002.gguf"]
    assert zoo.gguf_file(names) == "m-f16.gguf"
    assert zoo.gguf_file(["b.gguf", "a.gguf"]) == "a.gguf"


# ---------------------------------------------------------------- the query, checked


@pytest.mark.parametrize(
    "entry,message",
    [
        ({"name": "t", "limit": 5, "pipeline": "x"}, "unknown setting 'pipeline'"),
        ({"name": "t"}, "limit is required"),
        ({"name": "../t", "limit": 5}, "name '../t'"),
        ({"name": "t", "limit": 0}, "limit: 0 must be an integer ≥ 1"),
        ({"name": "t", "limit": 5, "sort": "stars"}, "sort: 'stars' must be one of"),
        ({"name": "t", "limit": 5, "gated": "no"}, "gated"),
        ({"name": "t", "limit": 5, "num_parameters": "over 9000"}, "num_parameters"),
        ({"name": "t", "limit": 5, "groups": ["table_s9"]}, "groups"),
        ({"name": "t", "limit": 5, "batch_size": 0}, "batch_size"),
    ],
)
def test_a_query_mistake_is_an_error_naming_the_setting(entry, message):
    with pytest.raises(InputError, match=message):
        zoo.Zoo.from_config(entry)


def test_the_schema_and_the_module_know_the_same_zoo_settings_and_defaults():
    schema = yaml.safe_load((ROOT / "workflow" / "schemas" / "config.schema.yaml").read_text())
    properties = schema["properties"]["zoo"]["properties"]
    assert set(properties) == set(zoo.QUERY_KEYS) | set(zoo.ENTRY_KEYS)
    defaults = {key: spec["default"] for key, spec in properties.items() if "default" in spec}
    assert defaults == {**zoo.QUERY_DEFAULTS, **zoo.ENTRY_DEFAULTS}
    assert schema["properties"]["zoo"]["additionalProperties"] is False


# ---------------------------------------------------------------- attngeom zoo resolve, and the pinned list


def resolve(folder: Path, capsys, *extra: str) -> tuple[int, str]:
    """``attngeom zoo resolve zoo.yaml`` in ``folder``, in this process (huggingface_hub pointed at the
    server by the ``hub`` fixture); its exit code and what it printed on stderr."""
    capsys.readouterr()
    cwd = Path.cwd()
    os.chdir(folder)
    try:
        code = main(["zoo", "resolve", "zoo.yaml", *extra])
    finally:
        os.chdir(cwd)
    return code, capsys.readouterr().err


def write_zoo_config(folder: Path, **query) -> dict:
    entry = {"name": "tiny", **query}
    (folder / "zoo.yaml").write_text(yaml.safe_dump({"zoo": entry}))
    return entry


def test_resolve_pins_the_listing_once_and_refuses_to_replace_it_without_update(
    emulated, hub, tmp_path, monkeypatch, capsys
):
    entry = write_zoo_config(tmp_path, limit=20, pipeline_tag="text-generation")
    code, err = resolve(tmp_path, capsys)
    assert code == 0, err
    pinned = tmp_path / "config" / "zoo" / "tiny.yaml"
    document = yaml.safe_load(pinned.read_text())
    assert document["query"] == {"sort": "downloads", "limit": 20, "pipeline_tag": "text-generation"}
    assert document["endpoint"] == hub.url and document["resolved_at"].endswith("Z")
    assert [m["id"] for m in document["models"]] == expected(
        emulated, lambda r, i: i["pipeline_tag"] == "text-generation", limit=20
    )
    code, err = resolve(tmp_path, capsys)
    assert code == 2 and err.count("\n") == 1 and "pass --update" in err
    monkeypatch.chdir(tmp_path)
    assert [m["id"] for m in zoo.read_pinned(zoo.Zoo.from_config(entry))] == [
        m["id"] for m in document["models"]
    ]
    with pytest.raises(InputError, match="resolved for another query .*limit.*--update"):
        zoo.read_pinned(zoo.Zoo.from_config({**entry, "limit": 21}))
    with pytest.raises(InputError, match="no pinned list config/zoo/other.yaml; run `attngeom zoo resolve"):
        zoo.read_pinned(zoo.Zoo.from_config({**entry, "name": "other"}))
    assert resolve(tmp_path, capsys, "--update")[0] == 0


def test_resolve_says_in_one_line_what_went_wrong_and_writes_nothing(hub, tmp_path, monkeypatch, capsys):
    from huggingface_hub import constants

    write_zoo_config(tmp_path, limit=5, author="nobody")
    outcomes = {"lists no model": resolve(tmp_path, capsys)}
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        closed = f"http://127.0.0.1:{probe.getsockname()[1]}"
    monkeypatch.setattr(constants, "ENDPOINT", closed)
    outcomes["cannot reach"] = resolve(tmp_path, capsys)
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    outcomes["HF_HUB_OFFLINE"] = resolve(tmp_path, capsys)
    for words, (code, err) in outcomes.items():
        assert code == 2 and err.startswith("attngeom: error: ") and err.count("\n") == 1, err
        assert words in err
    assert not (tmp_path / "config").exists()


def test_pinned_models_join_the_registry_with_their_kind_and_the_config_wins(
    emulated, hub, tmp_path, monkeypatch, capsys
):
    write_zoo_config(tmp_path, limit=N, groups=["figure_2", "figure_s2"])
    assert resolve(tmp_path, capsys)[0] == 0
    monkeypatch.chdir(tmp_path)
    entry = zoo.Zoo.from_config({"name": "tiny", "limit": N, "groups": ["figure_2", "figure_s2"]})
    listed_too = next(r for r, k in emulated.outcomes.items() if k.name == "bert")
    mine = {"id": listed_too, "objective": "bidirectional", "family": "mine", "path": "x"}
    entries, added = zoo.with_zoo([mine], entry)
    assert len(entries) == N and listed_too not in added and len(added) == N - 1
    models = {m.id: m for m in build_registry(entries, "results").values()}
    assert models[listed_too].family == "mine"
    for repo in added:
        model, kind = models[repo], emulated.outcomes[repo].name
        assert model.kind == "hub" and model.role == "pretrained" and model.revision == emulated.commits[repo]
        assert model.location == (f"{repo}/tiny.Q8_0.gguf" if kind == "llama-gguf" else repo)
        if kind in ("t5", "whisper"):
            assert (model.objective, model.groups) == ("encoder-decoder", ("figure_s2",))
        elif kind == "vit":
            assert (model.modality, model.groups) == ("vision", ())  # figure_s1 was not asked for
        elif kind in ("mamba", "unknown-type"):
            assert (model.objective, model.groups) == ("unknown", ())
        elif kind in ("bert", "qwen2"):
            assert (
                model.groups == ("figure_2",) and model.family == emulated.infos[repo]["config"]["model_type"]
            )


# ---------------------------------------------------------------- scoring the pinned commit, in batches


def jobs_for(emulated, repos: list[str], folder: Path) -> list[outcome.ScoreJob]:
    out = []
    for i, repo in enumerate(repos):
        location = f"{repo}/tiny.Q8_0.gguf" if emulated.outcomes[repo].name == "llama-gguf" else repo
        files = [str(folder / f"{i}.{suffix}") for suffix in ("parquet", "status.json", "log")]
        out.append(outcome.ScoreJob(repo, location, emulated.commits[repo], *files))
    return out


def test_a_batch_records_every_model_as_its_kind_says(emulated, hub, tmp_path):
    repos = [next(r for r, k in emulated.outcomes.items() if k.name == kind.name) for kind in KINDS]
    jobs = jobs_for(emulated, repos, tmp_path)
    statuses = batches.score_batch(jobs, outcome.ScoreOptions(), threads=1)
    for repo, job, status in zip(repos, jobs, statuses, strict=True):
        kind = emulated.outcomes[repo]
        assert status["status"] == kind.outcome, (repo, status)
        assert json.loads(Path(job.status).read_text()) == status
        frame = pd.read_parquet(job.scores)
        if kind.outcome == "ok":
            assert set(frame["model_id"]) == {repo} and set(frame["revision"]) == {emulated.commits[repo]}
        else:
            assert frame.empty and kind.reason in status["reason"], status
            assert "\n" not in status["reason"] and str(tmp_path) not in status["reason"]


def test_a_batch_records_its_models_in_two_files_and_one_log(emulated, hub, tmp_path):
    kinds = ("bert", "gated", "mamba", "gpt2-bin")
    repos = [next(r for r, k in emulated.outcomes.items() if k.name == kind) for kind in kinds]
    jobs = jobs_for(emulated, repos, tmp_path)
    files = batches.BatchFiles(
        *(str(tmp_path / f"batch.{kind}") for kind in ("parquet", "status.json", "log"))
    )
    models = [(job.model, job.location, job.revision) for job in jobs]
    statuses = batches.score_into(models, files, outcome.ScoreOptions(), threads=1)
    assert json.loads(Path(files.status).read_text()) == statuses
    assert [s["status"] for s in statuses] == ["ok", "failed", "failed", "ok"]
    frame = read_scores(files.scores)
    assert list(dict.fromkeys(frame["model_id"])) == [repos[0], repos[3]]
    log = Path(files.log).read_text()
    assert [line for line in log.splitlines() if line.startswith("== ")] == [
        f"== {repo}: {status['status']}" for repo, status in zip(repos, statuses, strict=True)
    ]
    assert "gated" in log.split(f"== {repos[1]}")[1].split("== ")[0]  # each model's own log under its line
    rows = [{"model": repo} for repo in repos]
    _, table = collect(rows, [files.scores], [files.status])
    assert list(table["status"]) == ["ok", "failed", "failed", "ok"]
    status, scores = model_records(repos[3], files.scores, files.status)
    assert status == statuses[3] and set(scores["model_id"]) == {repos[3]} and len(scores)
    status, scores = model_records(repos[2], files.scores, files.status)
    assert status["status"] == "failed" and scores.empty
    with pytest.raises(ValueError, match="holds no status of model 'org/none'"):
        model_records("org/none", files.scores, files.status)


def test_a_batch_with_no_model_scored_still_has_the_records_schema(emulated, hub, tmp_path):
    repo = next(r for r, k in emulated.outcomes.items() if k.name == "no-weights")
    files = batches.BatchFiles(*(str(tmp_path / f"b.{kind}") for kind in ("parquet", "status.json", "log")))
    (status,) = batches.score_into(
        [(repo, repo, emulated.commits[repo])], files, outcome.ScoreOptions(), threads=1
    )
    assert status["status"] == "failed"
    frame = read_scores(files.scores)
    assert frame.empty and "symmetry" in frame.columns


def test_the_pinned_commit_is_scored_after_the_repository_moved_on(emulated, hub, tmp_path):
    repo = next(r for r, k in emulated.outcomes.items() if k.name == "qwen2")
    other = next(r for r, k in emulated.outcomes.items() if k.name == "llama-sharded")
    pinned = emulated.commits[repo]
    newer = hub.add_revision(repo, emulated.repos[other])
    (job,) = jobs_for(emulated, [repo], tmp_path)
    assert batches.score_batch([job], outcome.ScoreOptions(), threads=1)[0]["status"] == "ok"
    frame = read_scores(job.scores)
    direct = tmp_path / "direct.parquet"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "attngeom.cli",
            "score",
            str(emulated.repos[repo].resolve()),
            "-o",
            str(direct),
        ],
        check=True,
        capture_output=True,
        timeout=300,
    )
    local = read_scores(direct)
    assert set(frame["revision"]) == {pinned} != {newer}
    assert frame["model_type"].iloc[0] == "qwen2"
    for metric in ("symmetry", "directionality"):
        assert frame[metric].to_numpy() == pytest.approx(local[metric].to_numpy(), abs=1e-12, nan_ok=True)


def test_a_model_that_kills_its_process_is_recorded_and_the_batch_goes_on(
    emulated, hub, tmp_path, monkeypatch
):
    repos = [r for r, k in emulated.outcomes.items() if k.name == "bert"][:3]
    jobs = jobs_for(emulated, repos, tmp_path)
    real = outcome.score_and_record

    def killed_on_the_second(job, options, gpus):  # runs in the forked child
        if job.model == repos[1]:
            os.kill(os.getpid(), signal.SIGKILL)
        return real(job, options, gpus)

    monkeypatch.setattr(batches, "score_and_record", killed_on_the_second)
    statuses = batches.score_batch(jobs, outcome.ScoreOptions(), threads=1)
    assert [s["status"] for s in statuses] == ["ok", "crashed", "ok"]
    assert "killed by SIGKILL (out of memory?)" in statuses[1]["reason"]
    assert pd.read_parquet(jobs[1].scores).empty
    assert "killed by SIGKILL" in Path(jobs[1].log).read_text()


def test_batches_hold_one_device_sorted_by_size_with_the_resources_of_their_models():
    entries = [
        {"id": f"o/m{i}", "objective": "autoregressive", "n_params": int(n)}
        for i, n in enumerate([1e6, 8e9, 2e6, 3e6, 1e10, 5e6, 4e6])
    ]
    models = list(build_registry(entries, "results").values())
    scoring = {"device": "auto", "gpu_min_params": 7e9, "max_threads": 4, "max_mem_mb": 256000}
    planned = batches.plan_batches(models, scoring, size=3)
    assert [b.slugs for b in planned] == [("o--m0", "o--m2", "o--m3"), ("o--m6", "o--m5"), ("o--m1", "o--m4")]
    assert [b.resources.gpu for b in planned] == [0, 0, 1]
    each = {m.slug: score_resources(m, scoring) for m in models}
    for batch in planned:
        members = [each[s] for s in batch.slugs]
        assert batch.resources.mem_mb == max(r.mem_mb for r in members) + batches.PARENT_MB
        assert batch.resources.runtime >= max(r.runtime for r in members)
        assert batch.resources.threads == max(r.threads for r in members)


def test_a_reason_without_the_model_it_names_counts_alike_across_models():
    reasons = [
        "org-1/a: gated repository (HTTP 401); set HF_TOKEN",
        "org-2/b: gated repository (HTTP 401); set HF_TOKEN",
        "org-3/c/model.safetensors@1a2b3c4d: bytes 10240-20479 lie past the end of the file; it is corrupted",
        "org-4/d/model.safetensors@5e6f7a8b: bytes 40960-51199 lie past the end of the file; it is corrupted",
    ]
    kinds = [reason_kind(r) for r in reasons]
    assert kinds[0] == kinds[1] == "gated repository (HTTP 401)"
    assert kinds[2] == kinds[3] == "bytes N-N lie past the end of the file"
