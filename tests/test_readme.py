"""Every shell command of every README and documentation page runs: each is in COMMANDS with how it is
exercised, and a command missing from the table fails the test, so the pages cannot drift from the code.

What can run here runs for real: `make run` itself (once per session, in a copy of the repository, shared
by the commands that need a finished default run: the report, the whole run again, one model's target),
the training commands (with tiny sizes appended: later settings win), the scoring and zoo commands (tiny
models, the emulated Hub). What cannot stays checked another way, and says why: the paper's config (151 Hub
models: a dry run, offline), SLURM (a dry run; CI's real SLURM runs tests/test_slurm.py), GPU benchmarks
(their options against the script's --help), `make test` and `make test-slow` (the suite inside itself:
`make -n`)."""

from __future__ import annotations

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
    environment = dict(os.environ, PATH=f"{BIN}{os.pathsep}{os.environ['PATH']}", HF_HUB_OFFLINE="1", **env)
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
    reinstall it), the embedded default end to end, then the report (about 7 minutes on 2 cores)."""
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
    )  # 7 min quiet; far more when loaded
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
    """The export and the SLURM command in one shell: the dry-run shows the partition it would ask for."""
    (dry,) = [c for c in readme_commands() if c.startswith("snakemake --profile profiles/slurm")][:1]
    words = shlex.split(dry)
    extra = f"-n --snakefile {ROOT / 'workflow' / 'Snakefile'} --directory {tmp_path}"
    script = f"{command} && {sys.executable} -m snakemake {extra} {shlex.join(words[1:])}"
    out = run(["bash", "-c", script], cwd=ROOT).stdout
    assert "slurm_partition=gpu" in out and "slurm_account=myproject" in out


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
    "[--dense-heads 2] [--threads 1]": exercise_script_options,
    "for run in 1 2 3 4 5; do time attngeom score benchmarks/.cache/llama-3.2-1b-shaped --quiet -o s.parquet; "
    "done": exercise_timing_loop,
    "python benchmarks/bench_scoring.py --part devices --repeat 5": exercise_script_options,
    "python benchmarks/bench_training.py prepare": exercise_script_options,
    "python benchmarks/bench_training.py run": exercise_script_options,
    "python benchmarks/bench_training.py run --preset 4 --systems plain-compiled attngeom-compiled --profile DIR": (
        exercise_script_options
    ),
    "python benchmarks/bench_training.py attention": exercise_script_options,
    "python benchmarks/profile_training.py": exercise_script_options,
    "python benchmarks/profile_training.py --layers 12": exercise_script_options,
    "python benchmarks/profile_training.py --out mini.json": exercise_script_options,
    "OMP_NUM_THREADS=1 python benchmarks/masked_vs_padded.py": exercise_script_options,
    "python benchmarks/masked_vs_padded.py --preset gpu --steps 2750 --jobs 6 --out "
    "benchmarks/results/masked_vs_padded_h200": exercise_script_options,
    "python benchmarks/ddp_scaling.py OUT --grad-accum 8": exercise_script_options,
    "python benchmarks/bench_corpus_bounds.py [--megabytes 20] [--gzip-megabytes 150]": exercise_script_options,
    "python benchmarks/multi_gpu_pipeline.py OUT [--workdir DIR] [--configfile CONFIG]": exercise_script_options,
    "python benchmarks/bench_zoo.py [-n 1000] [--per-model 40] [--slurm] [--plan-only] "
    "[--json benchmarks/results/zoo.json]": exercise_script_options,
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
    "export ATTNGEOM_SLURM_PARTITION=gpu ATTNGEOM_SLURM_ACCOUNT=myproject": exercise_slurm,
    "attngeom zoo resolve config/zoo.yaml": exercise_zoo,
    "attngeom zoo resolve config/zoo.yaml --update": covered_by_zoo,
    "snakemake --profile profiles/local all --configfile config/zoo.yaml": covered_by_zoo,
    "snakemake --profile profiles/slurm all --configfile config/zoo.yaml": covered_by_zoo,
}


def test_every_readme_command_is_in_the_table():
    commands = readme_commands()
    assert [c for c in commands if c not in COMMANDS] == [], "add these README commands to COMMANDS"
    assert [c for c in COMMANDS if c not in commands] == [], "these are no longer in the README"


AFTER_THE_DEFAULT_RUN = (exercise_make_run, exercise_snakemake_after_the_default_run, exercise_report)
"""What needs the finished default run (the session's default_run fixture)."""


@pytest.mark.slow
@pytest.mark.parametrize(
    "command", [c for c in COMMANDS if COMMANDS[c] not in AFTER_THE_DEFAULT_RUN], ids=lambda c: c[:50]
)
def test_readme_command_runs(command, tmp_path):
    COMMANDS[command](command, tmp_path)


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
