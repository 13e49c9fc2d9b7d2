"""Random-initialised controls: ``AutoConfig.for_model(model_type, **settings)`` saved as safetensors.

Random matrices score about 0, so these are the pipeline's controls. Their settings are checked against
the transformers config class when the DAG is built: a typo such as ``num_hidden_layer`` would otherwise
be stored as an unused attribute and silently build a model of the default depth. The check runs in a
child process (``check_in_child``), so the process building the DAG never imports transformers or torch;
where Snakemake runs without transformers (the rules in their own environment), the job checks instead.
"""

from __future__ import annotations

import difflib
import json
import os
import subprocess
import sys
from importlib.util import find_spec
from pathlib import Path

from ..errors import InputError
from ..files import atomic_dir

PREFIX = "attngeom: error: "


def _config_class(model_type: str):
    from transformers import CONFIG_MAPPING

    if model_type not in CONFIG_MAPPING:
        near = difflib.get_close_matches(model_type, list(CONFIG_MAPPING.keys()), n=3)
        hint = f"; did you mean {', '.join(near)}?" if near else ""
        raise InputError(f"model_type {model_type!r} is not a transformers model type{hint}")
    return CONFIG_MAPPING[model_type]


def check_settings(model_type: str, settings: dict) -> None:
    """Every key of ``settings`` is a setting of ``model_type``'s config class, else an error naming the
    valid names nearest to it."""
    config_class = _config_class(model_type)
    valid = set(config_class().to_dict()) | set(getattr(config_class, "attribute_map", {}))
    for key in settings:
        if key not in valid:
            near = difflib.get_close_matches(key, sorted(valid), n=3, cutoff=0.6)
            hint = f"did you mean {', '.join(near)}?" if near else f"valid: {', '.join(sorted(valid))}"
            raise InputError(f"{key!r} is not a setting of {config_class.__name__} ({model_type}); {hint}")
    from transformers.utils import logging

    verbosity = logging.get_verbosity()
    logging.set_verbosity_error()  # warnings about token ids of a tiny vocabulary are not errors
    try:
        config_class(**settings)  # the config class's own type checks
    except Exception as err:  # transformers raises its own validation error classes
        message = " ".join(line.strip() for line in str(err).splitlines() if line.strip())
        raise InputError(f"{config_class.__name__} refuses these settings: {message}") from None
    finally:
        logging.set_verbosity(verbosity)


def check_in_child(controls: dict[str, dict]) -> None:
    """``check_settings`` of every control (model id → its ``random:`` mapping) in a child process; the
    first refusal raised here. Skipped where transformers is not installed (``build`` checks then)."""
    if not controls or find_spec("transformers") is None:
        return
    child = [sys.executable, "-m", __name__]
    source = str(Path(__file__).resolve().parents[2])  # this attngeom, installed or not
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [source, os.environ.get("PYTHONPATH")])))
    done = subprocess.run(
        child, input=json.dumps(controls), capture_output=True, text=True, env=env, check=False
    )
    if done.returncode:
        lines = done.stderr.strip().splitlines()
        raise InputError(lines[-1].removeprefix(PREFIX) if lines else f"exit code {done.returncode}")


def _check_all(controls: dict[str, dict]) -> None:
    for model_id, random in controls.items():
        try:
            check_settings(random["model_type"], {k: v for k, v in random.items() if k != "model_type"})
        except InputError as err:
            raise InputError(f"config: model {model_id!r}: random: {err}") from None


FAILED_NOTE = "attngeom-build-failed.txt"
"""Left, alone, in a random control's folder that could not be built: its score job records the note's
reason as the model's failure, and every other model's tables and figures are made."""


def build(model_type: str, settings: dict, seed: int, output: str | os.PathLike) -> int:
    """The random model saved under ``output`` (safetensors, written atomically); its parameter count."""
    import torch
    from transformers import AutoConfig, AutoModel

    check_settings(model_type, settings)
    config = AutoConfig.for_model(model_type, **settings)
    torch.manual_seed(seed)
    model = AutoModel.from_config(config)
    with atomic_dir(Path(output)) as folder:
        model.save_pretrained(folder, safe_serialization=True)
    return sum(p.numel() for p in model.parameters())


def build_or_note(model_type: str, settings: dict, seed: int, output: str | os.PathLike) -> str:
    """``build``, and what to log; settings transformers accepts in the config but refuses when the
    model is built (``hidden_size: 30`` with 4 heads) leave ``output`` holding only ``FAILED_NOTE``."""
    try:
        n_params = build(model_type, settings, seed, output)
    except Exception as err:  # transformers' own checks raise ValueError, TypeError, AttributeError, ...
        first = " ".join(line.strip() for line in str(err).splitlines() if line.strip())
        reason = f"random control {model_type} {settings} cannot be built: {type(err).__name__}: {first}"
        with atomic_dir(Path(output)) as folder:
            (folder / FAILED_NOTE).write_text(reason + "\n", encoding="utf-8")
        return reason
    return f"random {model_type} {settings} seed {seed}: {n_params} parameters"


if __name__ == "__main__":  # check_in_child's child: the controls as JSON on stdin
    try:
        _check_all(json.load(sys.stdin))
    except InputError as err:
        print(f"{PREFIX}{err}", file=sys.stderr)
        raise SystemExit(2) from None
