"""Every shell command of every README and documentation page runs: each is in COMMANDS with how it is
exercised, and a command missing from the table fails the test, so the pages cannot drift from the code.

What can run here runs for real: `make run` itself (once per session, in a copy of the repository, shared
by the commands that need a finished default run: the report, the whole run again, one model's target),
the training commands (with tiny sizes appended: later settings win), the scoring and zoo commands (tiny
models, the emulated Hub), the benchmarks that run on a CPU (tiny sizes appended). What cannot stays checked
another way, and says why: the paper's config (151 Hub models: a dry run, offline), SLURM (a dry run; CI's
real SLURM runs tests/test_slurm.py), GPU benchmarks (their options against the script's --help, each with
its reason), `make test` and `make test-slow` (the suite inside itself: `make -n`).

Commands in the pages' prose (inline code that starts with a program: `attngeom cache ls`, `make setup`, ...)
are in PROSE the same way: run for real, or with the reason they are not (a fragment naming an option, a
command for a cluster or a GPU)."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pandas as pd
import pytest
import yaml
from bench_support import TINY_MODEL as TINY_BENCH_MODEL
from pipeline_support import ROOT, planned_jobs

from attngeom.files import slug

README = ROOT / "README.md"
DOCUMENTS = [
    README,
    *sorted(ROOT.glob("profiles/*/README.md")),
    ROOT / "benchmarks" / "README.md",
    *sorted(ROOT.glob("docs/*.md")),
    *sorted(ROOT.glob("config/README.md")),
]
"""The pages whose fenced shell commands are exercised."""
BIN = Path(sys.executable).parent
TINY_TRAINING = (
    "steps=2 hidden_size=16 n_heads=2 intermediate_size=32 seq_len=16 batch_size=2 grad_accum=1 "
    "vocab_size=200 max_documents=10 warmup_steps=1 log_every=1 score_every=1 checkpoint_every=1 device=cpu"
).split()
"""Appended to a README training command (later settings win): the same command, seconds on a CPU."""


def readme_commands(pages: list[Path] = DOCUMENTS) -> list[str]:
    """Each command of the pages' fenced shell blocks: continuation lines joined, comments dropped."""
    commands = []
    blocks = []
    for page in pages:
        blocks += re.findall(r"^```(?:bash|sh|shell)\n(.*?)^```", page.read_text(), flags=re.M | re.S)
    for block in blocks:
        for line in block.replace("\\\n", " ").splitlines():
            command = " ".join(re.sub(r"(^|\s)#.*$", "", line).split())
            if command:
                commands.append(command)
    return commands


def run(command: list[str], cwd: Path, timeout: int = 600, **env: str) -> subprocess.CompletedProcess:
    environment = {
        **os.environ,
        "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}",
        "HF_HUB_OFFLINE": "1",
        **env,
    }
    result = subprocess.run(
        command, cwd=cwd, env=environment, capture_output=True, text=True, timeout=timeout
    )
    assert result.returncode == 0, f"{shlex.join(command)}:\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
    return result


def snakemake_dry_run(command: str, tmp_path: Path) -> str:
    """The README's snakemake command, dry (-n) and in a scratch working directory."""
    words = shlex.split(command.replace("<slug>", slug(default_models()[0]["id"])))
    extra = ["-n", "--snakefile", str(ROOT / "workflow" / "Snakefile"), "--directory", str(tmp_path)]
    return run([sys.executable, "-m", "snakemake", *extra, *words[1:]], cwd=ROOT).stdout


def default_models() -> list[dict]:
    return yaml.safe_load((ROOT / "config" / "config.yaml").read_text())["models"]


def make_dry_run(target: str) -> str:
    return run(["make", "-n", target], cwd=ROOT).stdout


@pytest.fixture(scope="session")
def default_run(tmp_path_factory) -> Path:
    """`make run` for real, once per session: a copy of the repository's tracked files whose `.venv` is this
    environment (its set-up taken as done, `-o .venv/.installed`: the suite runs inside it and must not
    reinstall it), the embedded default end to end, then the report (14.5 minutes on 2 cores at load 8, docs/pipeline.md)."""
    copy = tmp_path_factory.mktemp("readme") / "attngeom"
    tracked = subprocess.run(
        ["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.split("\0")
    for name in filter(None, tracked):
        source = ROOT / name
        if source.is_file() and not source.is_symlink():
            (copy / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, copy / name)
        elif source.is_symlink():
            (copy / name).parent.mkdir(parents=True, exist_ok=True)
            (copy / name).symlink_to(os.readlink(source))
    (copy / ".venv").symlink_to(BIN.parent)
    run(
        ["make", "-o", ".venv/.installed", "run"], cwd=copy, timeout=3600
    )  # 14.5 min measured at load 8 on 2 cores
    return copy


def exercise_make_run(command: str, tmp_path: Path, default_run: Path) -> None:
    """Run for real by the default_run fixture: every output of the default, and the report."""
    results = default_run / "results"
    assert (results / "report.html").stat().st_size > 0 and (
        results / "aggregate" / "scores.parquet"
    ).is_file()
    models = pd.read_csv(results / "aggregate" / "models.csv")
    assert (models["status"] == "ok").all() and set(models["model"]) >= {m["id"] for m in default_models()}


def exercise_snakemake_after_the_default_run(command: str, tmp_path: Path, default_run: Path) -> None:
    """Run for real in the finished default run: the whole run again has nothing to do; one model's target,
    its scores removed first, scores that model again."""
    words = shlex.split(command.replace("<slug>", slug(default_models()[0]["id"])))
    target = next((w for w in words if w.startswith("results/")), None)
    if target:
        (default_run / target).unlink()
    done = run(words, cwd=default_run)
    if target:
        assert (default_run / target).is_file()
    else:
        assert "Nothing to be done" in done.stdout + done.stderr


def exercise_make_test(command: str, tmp_path: Path) -> None:
    """`make -n test` (`test-slow`) shows the suite's command for the tests not marked slow (those marked
    slow): running the suite inside itself would recurse."""
    target = command.split()[1]
    marks = {"test": '-m "not slow"', "test-slow": "-m slow"}[target]
    assert f".venv/bin/python -m pytest -q {marks}" in make_dry_run(target)


def test_make_run_takes_the_local_profile_s_cores_unless_told():
    """`make run` passes no --cores, so profiles/local's `cores: all` holds; `JOBS=N` limits it to N."""
    plain = [line for line in make_dry_run("run").splitlines() if "snakemake" in line and " all" in line]
    assert plain and all("--cores" not in line for line in plain)
    limited = run(["make", "-n", "run", "JOBS=3"], cwd=ROOT).stdout
    assert "--profile profiles/local --cores 3 all" in limited


def exercise_score_synopsis(command: str, tmp_path: Path) -> None:
    """Every option of the synopsis is an option of `attngeom score --help`."""
    help_text = run(["attngeom", "score", "--help"], cwd=tmp_path).stdout
    for option in re.findall(r"--?[a-z][a-z-]*", command):
        assert option in help_text, option


def exercise_score_packaged(command: str, tmp_path: Path) -> None:
    """Run as written, in a shell (``python`` is this environment's): the records carry the Hub id."""
    run(["bash", "-c", command], cwd=tmp_path)
    assert set(pd.read_parquet(tmp_path / "minilm.parquet")["model_id"]) == {
        "sentence-transformers/all-MiniLM-L6-v2"
    }


def exercise_activate(command: str, tmp_path: Path) -> None:
    """In a shell that has only the system's PATH, activating .venv puts its attngeom and snakemake first."""
    script = f"{command} && command -v attngeom snakemake"
    env = {"PATH": "/usr/bin:/bin", "HOME": os.environ.get("HOME", "/tmp")}
    result = subprocess.run(
        ["bash", "-c", script], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == [str(ROOT / ".venv" / "bin" / name) for name in ("attngeom", "snakemake")]


def exercise_script_options(command: str, tmp_path: Path) -> None:
    """A benchmark's command (several minutes, or a GPU host): its action and every option it names are
    in the script's ``--help``."""
    words = shlex.split(command)
    script = next(w for w in words if w.endswith(".py"))
    rest = words[words.index(script) + 1 :]
    action = [rest[0]] if rest and re.fullmatch(r"[a-z]+", rest[0]) else []
    help_text = run([sys.executable, str(ROOT / script), *action, "--help"], cwd=ROOT).stdout
    for option in re.findall(r"(?<![\w-])--?[a-z][a-z-]*", " ".join(rest)):
        assert option in help_text, f"{script}: {option}"
    assert all(re.search(rf"[{{,]{a}[,}}]", help_text) for a in action), f"{script}: no action {action}"


def exercise_timing_loop(command: str, tmp_path: Path) -> None:
    """The loop as written, in bash, with a tiny Llama where the benchmark writes its 1B-shaped one: five
    timed runs, each a report line of the shell's ``time``."""
    from transformers import AutoConfig, AutoModel

    config = AutoConfig.for_model(
        "llama", hidden_size=32, num_hidden_layers=1, num_attention_heads=4, num_key_value_heads=2,
        intermediate_size=64, vocab_size=64,
    )  # fmt: skip
    AutoModel.from_config(config).save_pretrained(tmp_path / "benchmarks" / ".cache" / "llama-3.2-1b-shaped")
    result = run(["bash", "-c", command], cwd=tmp_path)
    assert result.stderr.count("real") == 5 and (tmp_path / "s.parquet").is_file()


def exercise_ci_slurm(command: str, tmp_path: Path) -> None:
    """What CI itself does with a real SLURM (.ci/run): the scripts exist, are executable, and CI runs the
    SLURM tests with ATTNGEOM_SLURM=1 between them."""
    for script in re.findall(r"\.ci/slurm/\w+\.sh", command):
        assert os.access(ROOT / script, os.X_OK), script
    ci = (ROOT / ".ci" / "run").read_text()
    assert ".ci/slurm/up.sh" in ci and ".ci/slurm/down.sh" in ci and "export ATTNGEOM_SLURM=1" in ci
    assert "make test-slow" in ci and (ROOT / "tests" / "test_slurm.py").is_file()  # its tests are slow


def exercise_score_many(command: str, tmp_path: Path) -> None:
    """Two tiny models scored by one process into a folder: one Parquet file each."""
    from transformers import AutoConfig, AutoModel

    for name in ("first", "second"):
        config = AutoConfig.for_model(
            "bert", hidden_size=16, num_hidden_layers=1, num_attention_heads=2, intermediate_size=32
        )
        AutoModel.from_config(config).save_pretrained(tmp_path / name)
    run(["attngeom", "score", "first", "second", "-o", "scores", "--quiet"], cwd=tmp_path)
    assert sorted(p.name for p in (tmp_path / "scores").glob("*.parquet")) == [
        "first.parquet",
        "second.parquet",
    ]


def exercise_snakemake(command: str, tmp_path: Path) -> None:
    assert "This was a dry-run" in snakemake_dry_run(command, tmp_path)


def exercise_gpu_choice(command: str, tmp_path: Path) -> None:
    """As written, in a shell, dry: score jobs asking for 4 GPUs get what the command allows (2 GPUs named,
    or a limit of 1), whatever GPUs this machine has."""
    allowed = 2 if command.startswith("CUDA_VISIBLE_DEVICES=2,3 ") else 1
    extra = (
        f"--set-resources score:gpu=4 -n --snakefile {ROOT / 'workflow' / 'Snakefile'} --directory {tmp_path}"
    )
    out = run(["bash", "-c", f"{command} {extra}"], cwd=ROOT).stdout
    score_jobs = [resources for rule, _, resources in planned_jobs(out) if rule == "score"]
    assert score_jobs and all(resources.endswith(f"gpu={allowed}") for resources in score_jobs), out[-2000:]


def exercise_report(command: str, tmp_path: Path, default_run: Path) -> None:
    """Run for real on the finished default run, as written: the report again, from the repository's root."""
    (default_run / "results" / "report.html").unlink()
    run(shlex.split(command), cwd=default_run)
    assert "summary.csv" in (default_run / "results" / "report.html").read_text(errors="replace")


def exercise_forced_training(command: str, tmp_path: Path) -> None:
    """Dry here, as written: the train jobs are planned. Run for real, with a tiny run's targets for `all`,
    by tests/test_workflow_reruns.py (a scoring change trains nothing, this refreshes the evolution)."""
    planned = [rule for rule, _, _ in planned_jobs(snakemake_dry_run(command, tmp_path))]
    assert "train" in planned


def exercise_training(command: str, tmp_path: Path) -> None:
    """The training commands in order in one folder, each with TINY_TRAINING appended (`--config` needs
    config/, so the folder links it)."""
    (tmp_path / "config").symlink_to(ROOT / "config")
    for line in [c for c in readme_commands() if c.startswith("attngeom train ")]:
        run([*shlex.split(line), *TINY_TRAINING], cwd=tmp_path, ATTNGEOM_CACHE=str(tmp_path / "cache"))
    assert (tmp_path / "runs" / "enc-sym" / "final").is_dir() and (tmp_path / "runs" / "x" / "final").is_dir()
    stacked = [
        tmp_path / "runs" / f"enc-{init}-{seed}" for init in ("random", "symmetric") for seed in (0, 1, 2)
    ]
    assert all((run / "final").is_dir() and (run / "loss.parquet").is_file() for run in stacked)
    run(shlex.split("attngeom score runs/enc-sym/final"), cwd=tmp_path)
    assert len(pd.read_parquet(tmp_path / "scores.parquet")) > 0


def exercise_slurm(command: str, tmp_path: Path) -> None:
    """The export and the SLURM command in one shell: the dry-run shows the partition each job would ask
    for, the GPU one for the paper's training runs and its largest models, the CPU one for the rest."""
    (dry,) = [c for c in readme_commands() if c.startswith("snakemake --profile profiles/slurm")][:1]
    words = shlex.split(dry)
    extra = f"-n --snakefile {ROOT / 'workflow' / 'Snakefile'} --directory {tmp_path}"
    script = f"{command} && {sys.executable} -m snakemake {extra} {shlex.join(words[1:])}"
    jobs = planned_jobs(run(["bash", "-c", script], cwd=ROOT).stdout)
    partitions = {(rule, re.search(r"slurm_partition=(\w*)", resources)[1]) for rule, _, resources in jobs}
    assert {p for rule, p in partitions if rule in ("train", "score_gpu")} == {"gpu"}
    assert {p for rule, p in partitions if rule not in ("train", "score_gpu")} == {"cpu"}
    assert all("slurm_account=myproject" in resources for _, _, resources in jobs)


def covered_by_training(command: str, tmp_path: Path) -> None:
    """Run, in order, by exercise_training (the commands share one run folder)."""


def exercise_zoo(command: str, tmp_path: Path) -> None:
    """The zoo commands in order in one folder (config/zoo.yaml copied there) against the hub-like server
    serving emulated repositories: resolve pins what the query matches, --update lists again, then the
    Snakemake commands dry-run on the pinned list."""
    from zoo_repos import make_zoo

    (tmp_path / "config").mkdir()
    (tmp_path / "config" / "zoo.yaml").write_text((ROOT / "config" / "zoo.yaml").read_text())
    zoo = make_zoo(tmp_path / "hub", 60)
    server = zoo.server()
    env = dict(os.environ, PATH=f"{BIN}{os.pathsep}{os.environ['PATH']}", HF_HOME=str(tmp_path / "hf"))
    with server.running():
        for line in [c for c in readme_commands() if c.startswith("attngeom zoo ")]:
            resolved = subprocess.run(
                shlex.split(line),
                cwd=tmp_path,
                env=dict(env, HF_ENDPOINT=server.url, HF_HUB_DISABLE_XET="1"),
                capture_output=True,
                text=True,
                timeout=300,
            )
            assert resolved.returncode == 0, f"{line}:\n{resolved.stderr[-3000:]}"
    pinned = yaml.safe_load((tmp_path / "config" / "zoo" / "textgen.yaml").read_text())["models"]
    wanted = [
        repo
        for repo, info in zoo.infos.items()
        if info["pipeline_tag"] == "text-generation"
        and "transformers" in info["tags"]
        and info["downloads"] >= 10000
    ]
    assert sorted(m["id"] for m in pinned) == sorted(wanted) and wanted
    for line in [c for c in readme_commands() if c.startswith("snakemake ") and "config/zoo.yaml" in c]:
        assert "This was a dry-run" in snakemake_dry_run(line, tmp_path)


def covered_by_zoo(command: str, tmp_path: Path) -> None:
    """Run, in order, by exercise_zoo (the commands share one folder and its pinned list)."""


def options_only(reason: str) -> Callable[[str, Path], None]:
    """A benchmark command that cannot run here: its options against the script's ``--help``, and why."""

    def exercise(command: str, tmp_path: Path) -> None:
        exercise_script_options(command, tmp_path)

    exercise.__doc__ = f"Options against --help only: {reason}"
    return exercise


def benchmark_argv(command: str, tmp_path: Path, *tiny: str) -> list[str]:
    """The command's words from the script on (a synopsis's optional ``[...]`` dropped), then ``tiny``."""
    words = shlex.split(re.sub(r"\[[^]]*\]", "", command))
    script = next(w for w in words if w.endswith(".py"))
    return [sys.executable, str(ROOT / script), *words[words.index(script) + 1 :], *tiny]


def exercise_profile_training(command: str, tmp_path: Path, bench_cache: Path) -> None:
    """As written, on the CPU with a 2-layer, 32-wide model for one update (appended: later options win),
    on the corpus `bench_training.py prepare` writes (tests/bench_support.py): its figures as JSON."""
    out = [] if "--out" in command else ["--out", "profile.json"]
    tiny = [
        "--device",
        "cpu",
        "--layers",
        "2",
        "--warmup",
        "1",
        "--updates",
        "1",
        "--cache",
        str(bench_cache),
    ]
    tiny += [f"--set={s}" for s in (*TINY_BENCH_MODEL, "batch_documents=16")] + out
    done = run(benchmark_argv(command, tmp_path, *tiny), cwd=tmp_path)
    written = json.loads(next(tmp_path.glob("*.json")).read_text())
    assert "tokens/s" in done.stdout and written["tokens_per_s"] > 0


def exercise_device_gaps(command: str, tmp_path: Path, bench_cache: Path) -> None:
    """On the trace of a tiny CPU profile (``exercise_profile_training``'s): a CPU trace holds no GPU work,
    so the reading says none, and it runs through."""
    exercise_profile_training(
        "python benchmarks/profile_training.py --trace trace.json", tmp_path, bench_cache
    )
    done = run(benchmark_argv(command, tmp_path), cwd=tmp_path)
    assert "device, per update: 0 kernels" in done.stdout


def exercise_masked_vs_padded(command: str, tmp_path: Path) -> None:
    """As written, with `OMP_NUM_THREADS=1`, for 2 steps of 2 encoder seeds: both layouts trained and
    compared, the figures written."""
    tiny = ["--steps", "2", "--seeds", "2", "--objectives", "encoder"]
    tiny += ["--cache", str(tmp_path / "cache"), "--out", str(tmp_path / "out")]
    done = run(benchmark_argv(command, tmp_path, *tiny), cwd=tmp_path, OMP_NUM_THREADS="1")
    assert "padded" in done.stdout and any((tmp_path / "out").iterdir())


def exercise_corpus_bounds(command: str, tmp_path: Path) -> None:
    """With a 1 MB document and a 1 MB gzipped line: both corpora measured (peak memory, time)."""
    done = run(benchmark_argv(command, tmp_path, "--megabytes", "1", "--gzip-megabytes", "1"), cwd=tmp_path)
    assert "long-document" in done.stdout and "gzip-line" in done.stdout


def exercise_bench_zoo(command: str, tmp_path: Path) -> None:
    """With 6 emulated repositories (3 a process), resolved, planned and scored locally: the figures."""
    tiny = ["-n", "6", "--per-model", "3", "--json", str(tmp_path / "zoo.json")]
    run(
        benchmark_argv(command, tmp_path, *tiny), cwd=tmp_path, timeout=1200, HF_HUB_OFFLINE="0"
    )  # its own Hub
    figures = json.loads((tmp_path / "zoo.json").read_text())
    assert figures["n"] == 6 and figures["resolve_s"] >= 0 and figures["local"]


COMMANDS: dict[str, Callable[[str, Path], None]] = {
    "make run": exercise_make_run,
    "make test": exercise_make_test,
    "make test-slow": exercise_make_test,
    "attngeom score MODEL [-o scores.parquet] [--model-id ID] [--revision REV] [--device cpu|cuda[:N]] "
    "[--dtype float32|float64] [--variant excess|eq17] [--full-download] [--quiet]": exercise_score_synopsis,
    "attngeom score MODEL MODEL ... -o FOLDER [same options but --model-id]": exercise_score_many,
    'attngeom score "$(python -m attngeom.packaged all-MiniLM-L6-v2)" --model-id '
    "sentence-transformers/all-MiniLM-L6-v2 -o minilm.parquet": exercise_score_packaged,
    "source .venv/bin/activate": exercise_activate,
    "python benchmarks/bench_scoring.py [--part layer|model|all] [--dtype float32 --dtype float64] "
    "[--dense-heads 2] [--threads 1]": options_only(
        "its shapes are the measurement (a Llama-3.1-405B layer: d × d matrices of 2 GB; a 2.5 GB 1B-shaped "
        "checkpoint written first), with no smaller size: minutes and GBs beyond CI's budget"
    ),
    "for run in 1 2 3 4 5; do time attngeom score benchmarks/.cache/llama-3.2-1b-shaped --quiet -o s.parquet; "
    "done": exercise_timing_loop,
    "python benchmarks/bench_scoring.py --part devices --repeat 5": options_only(
        "compares cpu with cuda (a CUDA GPU) on the 2.5 GB 1B-shaped checkpoint"
    ),
    "python benchmarks/bench_training.py prepare": options_only(
        "writes its corpus into the checkout's benchmarks/.cache, which a test must not fill; "
        "tests/bench_support.py's bench_cache writes the same two files for the benchmark tests"
    ),
    "python benchmarks/bench_training.py run": options_only(
        "times every system on a CUDA GPU (torch.compile, CUDA graphs, bf16); its CPU path, --device cpu, "
        "is run by tests/test_bench_paper_setting.py"
    ),
    "python benchmarks/bench_training.py run --preset 4 --systems plain-compiled attngeom-compiled --profile DIR": (
        options_only("profiles compiled systems' CUDA kernels: a CUDA GPU")
    ),
    "python benchmarks/bench_training.py attention": options_only(
        "times the attention kernels of a CUDA GPU"
    ),
    "python benchmarks/profile_training.py": exercise_profile_training,
    "python benchmarks/profile_training.py --layers 12": exercise_profile_training,
    "python benchmarks/profile_training.py --out mini.json": exercise_profile_training,
    "python benchmarks/profile_training.py --update-graph fused": exercise_profile_training,
    "python benchmarks/profile_training.py --set update_graph=false": exercise_profile_training,
    "python benchmarks/profile_training.py --host-profile host.prof": exercise_profile_training,
    "python benchmarks/profile_training.py --trace trace.json": exercise_profile_training,
    "python benchmarks/device_gaps.py trace.json --updates 20": exercise_device_gaps,
    "OMP_NUM_THREADS=1 python benchmarks/masked_vs_padded.py": exercise_masked_vs_padded,
    "python benchmarks/masked_vs_padded.py --preset gpu --steps 2750 --jobs 6 --out "
    "benchmarks/results/masked_vs_padded_h200": options_only("preset gpu trains in bf16 on a CUDA GPU"),
    "python benchmarks/ddp_scaling.py OUT --grad-accum 8": options_only("runs on 1, 2 and 4 CUDA GPUs"),
    "python benchmarks/bench_corpus_bounds.py [--megabytes 20] [--gzip-megabytes 150]": exercise_corpus_bounds,
    "python benchmarks/multi_gpu_pipeline.py OUT [--workdir DIR] [--configfile CONFIG]": options_only(
        "hands one job to each of several CUDA GPUs"
    ),
    "python benchmarks/bench_zoo.py [-n 1000] [--per-model 40] [--slurm] [--plan-only] "
    "[--json benchmarks/results/zoo.json]": exercise_bench_zoo,
    ".ci/slurm/up.sh && ATTNGEOM_SLURM=1 .venv/bin/python -m pytest tests/test_slurm.py; .ci/slurm/down.sh": (
        exercise_ci_slurm
    ),
    "snakemake --profile profiles/local all": exercise_snakemake_after_the_default_run,
    "snakemake --profile profiles/slurm all --configfile config/paper.yaml": exercise_snakemake,
    "snakemake --profile profiles/local results/scores/<slug>.parquet": exercise_snakemake_after_the_default_run,
    "snakemake -n all --configfile config/paper.yaml": exercise_snakemake,
    "CUDA_VISIBLE_DEVICES=2,3 snakemake --profile profiles/local all": exercise_gpu_choice,
    "snakemake --profile profiles/local all --resources gpu=1": exercise_gpu_choice,
    "snakemake --report results/report.html": exercise_report,
    "snakemake --profile profiles/local all --forcerun train": exercise_forced_training,
    "attngeom train --out runs/enc-sym steps=2000 n_layers=4 objective=encoder init=symmetric dataset=sotu": (
        exercise_training
    ),
    "attngeom train --out runs/enc-sym --restart steps=4000 n_layers=4 objective=encoder init=symmetric "
    "dataset=sotu": covered_by_training,
    "attngeom train --out runs/x --config config/config.yaml --run decoder-random": covered_by_training,
    "attngeom train --out runs/enc-{init}-{seed} --seeds 0,1,2 --inits random,symmetric steps=2000 n_layers=4 "
    "objective=encoder dataset=sotu": covered_by_training,
    "attngeom score runs/enc-sym/final": covered_by_training,
    "export ATTNGEOM_SLURM_CPU_PARTITION=cpu ATTNGEOM_SLURM_GPU_PARTITION=gpu ATTNGEOM_SLURM_ACCOUNT=myproject": (
        exercise_slurm
    ),
    "attngeom zoo resolve config/zoo.yaml": exercise_zoo,
    "attngeom zoo resolve config/zoo.yaml --update": covered_by_zoo,
    "snakemake --profile profiles/local all --configfile config/zoo.yaml": covered_by_zoo,
    "snakemake --profile profiles/slurm all --configfile config/zoo.yaml": covered_by_zoo,
}


PROGRAMS = (
    "attngeom", "snakemake", "python", "make", "pip", "mkdocs", "sh", "bash", "export", "source", "srun",
    "sbatch", "scontrol", "squeue", "sacct", "nvidia-cuda-mps-control", "torchrun", "uv", "conda", "git",
)  # fmt: skip
"""What a command in the pages' prose starts with (or a script path, or VARIABLE=value)."""


def prose_commands(pages: list[Path] = DOCUMENTS) -> list[str]:
    """Each inline code span of the pages' prose (fenced blocks left out) that is a command with arguments:
    a program of PROGRAMS, a script path or an environment assignment first; a program's output quoted
    (`attngeom: error: ...`) is not one."""
    found = []
    for page in pages:
        prose = re.sub(r"^```.*?^```", "", page.read_text(), flags=re.M | re.S)
        for span in re.findall(r"(?<!`)`([^`]+)`(?!`)", prose):
            command = " ".join(span.split())
            first = command.split()[0]
            output = any(word.endswith(":") for word in command.split()[:2])  # `attngeom train: up to ...`
            if (
                " " in command
                and not output
                and (
                    first in PROGRAMS
                    or first.startswith((".ci/", "./"))
                    or re.match(r"[A-Z_]+=\S* ", command)
                )
            ):
                found.append(command)
    return list(dict.fromkeys(found))


def exercise_make_setup(command: str, tmp_path: Path) -> None:
    """`make -n -B` (every step printed, none run: it would rebuild this environment from PyPI): a venv,
    torch 2.13.0 from the index TORCH_INDEX names (none when empty), then this package with its extras."""
    words = shlex.split(command)
    printed = run(["make", "-n", "-B", *words[1:]], cwd=ROOT).stdout
    index = dict(w.split("=", 1) for w in words if "=" in w).get(
        "TORCH_INDEX", "https://download.pytorch.org/whl/cpu"
    )
    torch_line = next(line for line in printed.splitlines() if "torch==2.13.0" in line)
    assert (f"--extra-index-url {index}" in torch_line) == bool(index), torch_line
    assert "-m venv .venv" in printed and 'pip install --quiet -e ".[pipeline,test,interp,docs]"' in printed


def exercise_pip_extras(command: str, tmp_path: Path) -> None:
    """Not run (it reinstalls this environment from PyPI): every extra it names is declared by attngeom and
    every requirement of that extra is installed here, which is what the command gives."""
    from importlib.metadata import PackageNotFoundError, requires, version

    from packaging.requirements import Requirement

    extras = re.search(r"\.\[([\w,]+)\]", command)[1].split(",")
    declared = [Requirement(r) for r in requires("attngeom") or []]
    for extra in extras:
        wanted = [r for r in declared if r.marker and r.marker.evaluate({"extra": extra})]
        assert wanted, f"attngeom declares no extra {extra!r}"
        for requirement in wanted:
            try:
                assert version(requirement.name) in requirement.specifier, requirement
            except PackageNotFoundError:
                raise AssertionError(f"{requirement} ({extra}) is not installed") from None


def exercise_mkdocs_serve(command: str, tmp_path: Path) -> None:
    """For real, on a free port of 127.0.0.1: the site's first page is served, then the server is stopped."""
    import socket
    import time
    import urllib.request

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = subprocess.Popen(
        [*shlex.split(command), "--dev-addr", f"127.0.0.1:{port}"],
        cwd=ROOT, env=dict(os.environ, PATH=f"{BIN}{os.pathsep}{os.environ['PATH']}"),
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        for _ in range(240):
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=5) as page:
                    assert page.status == 200 and b"attngeom" in page.read()
                    return
            except OSError:
                assert server.poll() is None, "mkdocs serve ended"
                time.sleep(0.5)
        raise AssertionError("mkdocs serve did not answer within 2 minutes")
    finally:
        server.terminate()
        server.wait(timeout=60)


def exercise_support_table(command: str, tmp_path: Path) -> None:
    """For real on a copy of the page: written from the packaged conformance results, the page is unchanged
    (the committed table is up to date)."""
    (tmp_path / "docs").mkdir()
    shutil.copy(ROOT / "docs" / "support.md", tmp_path / "docs" / "support.md")
    run(shlex.split(command), cwd=tmp_path)
    assert (tmp_path / "docs" / "support.md").read_text() == (ROOT / "docs" / "support.md").read_text()


def exercise_one_type(command: str, tmp_path: Path) -> None:
    """For real for one type (NAME: falcon, a type of the hand-written table), written to a file here rather
    than over the packaged results: the type has its verdict."""
    out = tmp_path / "one.json"
    run([*shlex.split(command.replace("NAME", "falcon")), str(out)], cwd=tmp_path)
    assert set(json.loads(out.read_text()).get("types", json.loads(out.read_text()))) == {"falcon"}


def exercise_packaged(command: str, tmp_path: Path) -> None:
    """For real, NAME the packaged encoder: the folder it prints holds the model."""
    printed = run(shlex.split(command.replace("NAME", "all-MiniLM-L6-v2")), cwd=tmp_path).stdout.strip()
    assert (Path(printed) / "config.json").is_file()


def exercise_cache(command: str, tmp_path: Path) -> None:
    """The four cache commands in order on a cache filled by scoring two revisions of a tiny model from the
    hub-like server (REPO, REV: that repository and its older commit): listed, one revision cleared, the
    repository, then everything."""
    from hubserver import HubServer
    from transformers import AutoConfig, AutoModel

    def tiny(folder: Path, layers: int) -> Path:
        config = AutoConfig.for_model(
            "bert", hidden_size=16, num_hidden_layers=layers, num_attention_heads=2, intermediate_size=32
        )
        AutoModel.from_config(config).save_pretrained(folder)
        return folder

    repo = "org/tiny"
    server = HubServer({repo: tiny(tmp_path / "v1", 1)})
    env = {"ATTNGEOM_CACHE": str(tmp_path / "cache"), "HF_HOME": str(tmp_path / "hf"), "HF_HUB_OFFLINE": "0"}
    env |= {"HF_ENDPOINT": server.url, "HF_HUB_DISABLE_XET": "1"}
    with server.running():
        run(["attngeom", "score", repo, "-o", "a.parquet", "--quiet"], cwd=tmp_path, **env)
        old = server.head(repo)
        server.add_revision(repo, tiny(tmp_path / "v2", 2))
        run(["attngeom", "score", repo, "-o", "b.parquet", "--quiet"], cwd=tmp_path, **env)
    # the narrowest first: clearing what is no longer cached is an error
    order = [
        "attngeom cache ls",
        "attngeom cache clear REPO --revision REV",
        "attngeom cache clear REPO",
        "attngeom cache clear",
    ]
    assert sorted(c for c in prose_commands() if c.startswith("attngeom cache ")) == sorted(order)
    for line in order:
        run(shlex.split(line.replace("REPO", repo).replace("REV", old)), cwd=tmp_path, **env)
        listed = run(["attngeom", "cache", "ls"], cwd=tmp_path, **env).stdout
        revisions = {"attngeom cache ls": 2, "attngeom cache clear REPO --revision REV": 1}.get(line, 0)
        assert listed.count(repo) == revisions, (line, listed)
    assert not any((tmp_path / "cache").rglob("*.json"))


def exercise_paper_config(command: str, tmp_path: Path) -> None:
    """For real, written here (-o) rather than over config/paper.yaml: the committed config is what it writes."""
    run([*shlex.split(command), "-o", str(tmp_path / "paper.yaml")], cwd=ROOT)
    assert (tmp_path / "paper.yaml").read_text() == (ROOT / "config" / "paper.yaml").read_text()


def exercise_repro_report(command: str, tmp_path: Path) -> None:
    """For real (OUT here): from the stored runs of one hold or several, the claims are those committed in
    the last folder's report/, and the horizon numbers (per seed and over seeds) those within a float's
    rounding."""
    words = shlex.split(command.replace("OUT", str(tmp_path / "out")))
    run(words, cwd=ROOT, timeout=1200)
    stored = ROOT / words[words.index("--out") - 1] / "report"
    assert (tmp_path / "out" / "claims.csv").read_text() == (stored / "claims.csv").read_text()
    for name in ("horizon.csv", "horizon_summary.csv"):
        pd.testing.assert_frame_equal(
            pd.read_csv(tmp_path / "out" / name), pd.read_csv(stored / name), rtol=1e-9
        )


def exercise_snakemake_prose(command: str, tmp_path: Path) -> None:
    """Dry, as written (`...` dropped), in a scratch working directory."""
    assert "This was a dry-run" in snakemake_dry_run(command.replace(" ...", ""), tmp_path)


def exercise_test_directory(command: str, tmp_path: Path) -> None:
    """Dry, as written, from the root, on a copy of .test: the catalog's command plans .test's config."""
    shutil.copytree(ROOT / ".test" / "config", tmp_path / ".test" / "config")
    words = [w if w != ".test" else str(tmp_path / ".test") for w in shlex.split(command)]
    done = run([sys.executable, "-m", "snakemake", "-n", *words[1:]], cwd=ROOT)
    assert "run=encoder-random" in done.stdout


def ci_runs(command: str, tmp_path: Path) -> None:
    """Run for real by CI (.ci/run), as written: too long for a test (minutes of training and scoring)."""
    assert f"\n  {command}\n" in (ROOT / ".ci" / "run").read_text()


def exercise_ci_slurm_prose(command: str, tmp_path: Path) -> None:
    """As exercise_ci_slurm: the scripts CI runs around the slow tests with a real SLURM."""
    exercise_ci_slurm(command.replace("make test-slow", "tests/test_slurm.py"), tmp_path)


FRAGMENT = "a fragment of a command (a program and an option it is given), not a command to copy"
NAMED = "names a command whose full forms the pages' fenced blocks give, run by COMMANDS"
PROSE: dict[str, Callable[[str, Path], None] | str] = {
    "make setup": exercise_make_setup,
    "make setup TORCH_INDEX=https://download.pytorch.org/whl/cu128": exercise_make_setup,
    "make setup TORCH_INDEX=": exercise_make_setup,
    "make run": "run for real by COMMANDS (the default_run fixture)",
    "make test": "COMMANDS: `make -n test` (the suite cannot run inside itself)",
    "make test-slow": "COMMANDS: `make -n test-slow` (the suite cannot run inside itself)",
    'pip install -e ".[docs]"': exercise_pip_extras,
    'pip install -e ".[pipeline]"': exercise_pip_extras,
    'pip install -e ".[interp]"': exercise_pip_extras,
    'pip install -e ".[pipeline,test,interp,docs]"': exercise_pip_extras,
    "pip install --no-deps -e .": "reinstalls this checkout into the environment; `make setup` does the same "
    "(its `make -n` is checked above)",
    "pip install --require-hashes -r envs/attngeom.lock.txt --extra-index-url https://download.pytorch.org/whl/cpu": (
        "needs PyPI and the PyTorch index (no network here); tests/test_packaging.py checks the lock against "
        "pyproject.toml and envs/attngeom.yaml"
    ),
    "uv pip compile --generate-hashes": "needs PyPI (no network here); the lock's header holds the whole command, "
    "and tests/test_packaging.py checks what it wrote",
    "mkdocs serve": exercise_mkdocs_serve,
    "attngeom support-table docs/support.md": exercise_support_table,
    "attngeom support-table --conformance docs/support.md": "reruns the conformance of every model_type "
    "(tens of minutes) and rewrites the packaged support.json; the slow conformance tests run that run "
    "(tests/conformance_sweep.py) and tests/test_support_table.py the table it writes",
    "python -m attngeom.conformance.run --types NAME": exercise_one_type,
    "python -m attngeom.conformance.table_agreement --types NAME": exercise_one_type,
    "python -m attngeom.conformance.run": "every model_type (tens of minutes): the slow conformance tests "
    "(tests/conformance_sweep.py) run it; one type runs above",
    "python -m attngeom.conformance.table_agreement": "every type of the hand-written table (minutes); one "
    "type runs above",
    "python -m attngeom.packaged NAME": exercise_packaged,
    "attngeom cache ls": exercise_cache,
    "attngeom cache clear": "run in order by exercise_cache",
    "attngeom cache clear REPO": "run in order by exercise_cache",
    "attngeom cache clear REPO --revision REV": "run in order by exercise_cache",
    "attngeom paper-config": exercise_paper_config,
    "python benchmarks/repro_training.py --report benchmarks/results/init_arms_4xh100 "
    "benchmarks/results/seeds_decoders_4xh200 --out OUT": exercise_repro_report,
    "python benchmarks/repro_training.py --report benchmarks/results/layers12_arms_4xh200 "
    "benchmarks/results/layers12_arms_s1_2xh200 benchmarks/results/layers12_arms_s1sym_h200 "
    "benchmarks/results/layers12_arms_s1td_h200 benchmarks/results/layers12_arms_s2_h200 "
    "benchmarks/results/layers12_arms_s2tds_h200 benchmarks/results/layers12_arms_s2symtd_2xh200 "
    "benchmarks/results/layers12_arms_s3_2xh200 benchmarks/results/layers12_arms_s3symtd_2xh200 "
    "--out OUT": exercise_repro_report,
    "python benchmarks/repro_training.py --gpus 4 --seeds 3 --steps 3000": "trains on 4 CUDA GPUs; its "
    "report, from the runs it stored, runs above",
    "python benchmarks/init_arms.py run --device cpu --tiny --experiments horizon --group-by run --gpus 1 "
    "--out RUNS": "run on the CPU by tests/test_init_arms.py (two of its four runs, then their Table 1 with "
    "the authors' columns)",
    "python benchmarks/bench_remote.py [--rate MB/s] [--latency ms]": "writes and serves a 2.5 GB "
    "1B-shaped checkpoint (the measurement's size); the range reader it times is tested on tiny models by "
    "tests/test_remote.py",
    "python benchmarks/document_attention.py": "times attention kernels on a CUDA GPU; its CPU path runs in "
    "tests/test_document_attention.py",
    "python benchmarks/head_loss.py": "run on the CPU by tests/test_head_loss_benchmark.py",
    "python benchmarks/checkpoint_pause.py": "run on the CPU by tests/test_checkpoint_pause_benchmark.py",
    "python benchmarks/bench_zoo.py -n 100000 --plan-only": "writes and serves 100,000 emulated repositories "
    "(minutes and GBs); COMMANDS runs bench_zoo.py for real at 6 (exercise_bench_zoo), and tests/test_zoo.py "
    "plans zoos through the same code",
    "sh benchmarks/mps_check.sh": "needs an NVIDIA GPU and nvidia-cuda-mps-control",
    "snakemake --profile profiles/slurm --cores 2 all": exercise_snakemake_prose,
    "snakemake --profile profiles/slurm -n all ...": exercise_snakemake_prose,
    "snakemake --directory .test": exercise_test_directory,
    "snakemake --cores 2 --directory .test all": ci_runs,
    "snakemake --report results/report.html": "run for real by COMMANDS on the default run",
    "snakemake --profile profiles/local all": "run for real by COMMANDS on the default run",
    ".ci/slurm/up.sh && ATTNGEOM_SLURM=1 make test-slow; .ci/slurm/down.sh": exercise_ci_slurm_prose,
    "scontrol show config | grep MinJobAge": "needs a SLURM controller (CI's runs tests/test_slurm.py)",
    "sbatch --cpus-per-task": FRAGMENT,
    "srun --mpi=none": FRAGMENT,
    "nvidia-cuda-mps-control -d": FRAGMENT + "; needs an NVIDIA GPU (tests/test_gpu_mps.py runs a stand-in)",
    "srun --nodes=2 --ntasks=2 --ntasks-per-node=1 --cpus-per-task=32 --gres=gpu:4 python -m "
    "attngeom.training.launch 4 -- <train arguments>": "what the train job runs on a SLURM allocation of 2 "
    "nodes; tests/test_launch.py checks the argv, CI's SLURM runs it (tests/test_slurm.py)",
    "torchrun --nnodes=$SLURM_NNODES --nproc-per-node=4 --rdzv-backend=c10d --rdzv-endpoint=<first host of "
    "$SLURM_JOB_NODELIST>:<port> --rdzv-id=$SLURM_JOB_ID": "what each node's launcher becomes under SLURM; "
    "tests/test_launch.py checks the argv, CI's SLURM runs it",
    "torchrun --nproc-per-node N attngeom train ...": "tests/test_training_ddp.py runs it with two CPU ranks",
    "attngeom train --config config/paper.yaml": "the paper's defaults train on CUDA for hours; "
    "tests/test_bench_paper_setting.py trains them on the CPU at a tiny size",
    "attngeom score": NAMED,
    "attngeom cache": NAMED,
    "attngeom train": NAMED,
    "attngeom zoo resolve": NAMED,
    "attngeom zoo resolve CONFIG": NAMED,
    "attngeom score DIR --quiet": NAMED,
    "attngeom score --model-id": NAMED,
    "attngeom train --seeds": NAMED,
    "attngeom train --seeds … --inits …": NAMED,
    "attngeom train --seeds 0,1,2 --inits random,symmetric": NAMED,
    "attngeom train --log-lines": NAMED,
    "snakemake -n all": NAMED,
    "snakemake --profile profiles/local": NAMED,
}
"""Every command of the pages' prose: how it is run here, or why it is not."""


def test_every_prose_command_is_in_the_table():
    commands = prose_commands()
    assert [c for c in commands if c not in PROSE] == [], "add these prose commands to PROSE"
    assert [c for c in PROSE if c not in commands] == [], "these are no longer in the pages' prose"
    assert all(len(why) > 20 for why in PROSE.values() if isinstance(why, str))


@pytest.mark.slow
@pytest.mark.parametrize("command", [c for c, how in PROSE.items() if callable(how)], ids=lambda c: c[:50])
def test_prose_command_runs(command, tmp_path):
    PROSE[command](command, tmp_path)


def test_every_readme_command_is_in_the_table():
    commands = readme_commands()
    assert [c for c in commands if c not in COMMANDS] == [], "add these README commands to COMMANDS"
    assert [c for c in COMMANDS if c not in commands] == [], "these are no longer in the README"


AFTER_THE_DEFAULT_RUN = (exercise_make_run, exercise_snakemake_after_the_default_run, exercise_report)
"""What needs the finished default run (the session's default_run fixture)."""
ON_THE_BENCHMARK_CORPUS = (exercise_profile_training, exercise_device_gaps)
"""What needs the corpus `bench_training.py prepare` writes (the bench_cache fixture)."""


@pytest.mark.slow
@pytest.mark.parametrize(
    "command",
    [c for c in COMMANDS if COMMANDS[c] not in AFTER_THE_DEFAULT_RUN + ON_THE_BENCHMARK_CORPUS],
    ids=lambda c: c[:50],
)
def test_readme_command_runs(command, tmp_path):
    COMMANDS[command](command, tmp_path)


@pytest.mark.slow
@pytest.mark.parametrize(
    "command", [c for c in COMMANDS if COMMANDS[c] in ON_THE_BENCHMARK_CORPUS], ids=lambda c: c[:50]
)
def test_readme_benchmark_runs_on_the_benchmark_corpus(command, tmp_path, bench_cache):
    COMMANDS[command](command, tmp_path, bench_cache)


def test_a_benchmark_checked_only_against_its_help_says_why():
    """Every benchmark command that is not run says why (options_only's reason)."""
    only = [c for c, exercise in COMMANDS.items() if exercise.__name__ == "exercise" and exercise.__doc__]
    assert len(only) == 9
    assert all(len(COMMANDS[c].__doc__) > 40 for c in only)
    assert exercise_script_options not in COMMANDS.values(), "say why a benchmark command is not run"


@pytest.mark.slow
@pytest.mark.parametrize(
    "command", [c for c in COMMANDS if COMMANDS[c] in AFTER_THE_DEFAULT_RUN], ids=lambda c: c[:50]
)
def test_readme_command_runs_on_the_default_run(command, tmp_path, default_run):
    COMMANDS[command](command, tmp_path, default_run)


def test_the_test_config_s_command_is_the_one_ci_runs_for_real():
    """The catalog's test config names its command in a comment; CI runs exactly that command, from the
    repository's root, at the pipeline's minimum versions (.ci/run)."""
    (command,) = re.findall(
        r"^#   (snakemake .*)$", (ROOT / ".test" / "config" / "config.yaml").read_text(), re.M
    )
    assert "--cores" in command and "--directory .test" in command
    assert f"\n  {command}\n" in (ROOT / ".ci" / "run").read_text()
