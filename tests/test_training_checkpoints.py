"""Checkpoints written while training goes on (``CheckpointWriter``): the file holds the state of the
moment it was asked for, tied weights stay one tensor, and a failed write is an error, not a silent gap."""

from __future__ import annotations

import pytest
import torch
from training_fixtures import TINY

from attngeom.training.checkpoint import CheckpointWriter
from attngeom.training.config import TrainConfig
from attngeom.training.loop import make_optimizer
from attngeom.training.model import build_model

CPU = torch.device("cpu")


@pytest.fixture
def trained():
    model = build_model(TrainConfig(**TINY), vocab_size=300)
    optimizer = make_optimizer(model, TrainConfig(**TINY), CPU)
    sum(p.sum() for p in model.parameters()).backward()
    optimizer.step()
    return model, optimizer


def test_the_file_holds_the_state_of_the_moment_it_was_asked_for(trained, tmp_path):
    model, optimizer = trained
    before = {name: t.clone() for name, t in model.state_dict().items()}
    path = tmp_path / "state.pt"
    with CheckpointWriter() as checkpoints:
        checkpoints.save(path, model.state_dict(), optimizer.state_dict(), 7, 1.5, CPU)
        with torch.no_grad():  # the next update, while the file may still be being written
            for param in model.parameters():
                param.add_(1.0)
    state = torch.load(path, weights_only=True)
    assert state["step"] == 7 and state["elapsed_s"] == 1.5
    for name, tensor in before.items():
        assert torch.equal(state["model"][name], tensor), name
    assert state["optimizer"]["state"][0]["exp_avg"].abs().sum() > 0


def test_tied_weights_stay_one_tensor_in_the_file(trained, tmp_path):
    model, optimizer = trained
    with CheckpointWriter() as checkpoints:
        checkpoints.save(tmp_path / "state.pt", model.state_dict(), optimizer.state_dict(), 1, 0.0, CPU)
    weights = torch.load(tmp_path / "state.pt", weights_only=True)["model"]
    embedding = weights["bert.embeddings.word_embeddings.weight"]
    assert weights["cls.predictions.decoder.weight"].data_ptr() == embedding.data_ptr()


def test_a_write_that_fails_raises_when_the_writer_is_waited_for(trained, tmp_path):
    model, optimizer = trained
    (tmp_path / "file").write_text("not a folder")
    with pytest.raises(OSError), CheckpointWriter() as checkpoints:
        checkpoints.save(
            tmp_path / "file" / "state.pt", model.state_dict(), optimizer.state_dict(), 1, 0.0, CPU
        )
    assert list(tmp_path.iterdir()) == [tmp_path / "file"]  # no temporary left behind


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_on_a_gpu_the_file_holds_the_state_of_the_moment_it_was_asked_for(tmp_path):
    """The copy is queued on the GPU's stream, not waited for: the next update's kernels, queued after it,
    must not reach the file."""
    gpu = torch.device("cuda")
    model = build_model(TrainConfig(**TINY), vocab_size=300).to(gpu)
    optimizer = make_optimizer(model, TrainConfig(**TINY), gpu)
    sum(p.sum() for p in model.parameters()).backward()
    optimizer.step()
    before = {name: t.cpu() for name, t in model.state_dict().items()}
    path = tmp_path / "state.pt"
    with CheckpointWriter() as checkpoints:
        checkpoints.save(path, model.state_dict(), optimizer.state_dict(), 3, 0.5, gpu)
        with torch.no_grad():
            for _ in range(20):  # enough queued work that a copy not ordered before it would see it
                for param in model.parameters():
                    param.mul_(1.01).add_(1.0)
    state = torch.load(path, weights_only=True)
    for name, tensor in before.items():
        assert torch.equal(state["model"][name], tensor), name
    assert state["model"]["bert.embeddings.word_embeddings.weight"].device.type == "cpu"
