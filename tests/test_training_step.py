"""The training step and its feed: same batches in the same order, same numbers compiled or not (CPU)."""

from __future__ import annotations

import random

import pytest
import torch

from attngeom.training.checkpoint import CheckpointWriter, load_checkpoint
from attngeom.training.config import make_config
from attngeom.training.corpus import load_corpus
from attngeom.training.loop import learning_rate, make_optimizer
from attngeom.training.model import build_model, head_logits
from attngeom.training.step import (
    CAPTURE_AFTER,
    CapturedUpdate,
    TrainStep,
    compile_mode,
    feed,
    grouped,
    micro_batch_indices,
    set_learning_rate,
)
from attngeom.training.stream_batches import PackedBatches

TINY = dict(n_layers=2, hidden_size=32, n_heads=4, intermediate_size=64, seq_len=48, vocab_size=301)
WORDS = "the a nation people congress state war peace law union free trade tax year work we our".split()


@pytest.fixture
def config(tmp_path):
    rng = random.Random(1)
    path = tmp_path / "corpus.txt"
    path.write_text("\n".join(" ".join(rng.choices(WORDS, k=rng.randint(2, 25))) for _ in range(300)) + "\n")
    settings = dict(TINY, dataset=str(path), cache_dir=str(tmp_path / "cache"), batch_size=3, grad_accum=2)
    return make_config(settings, {"dropout": 0.0, "steps": 4, "warmup_steps": 1, "lr": 1e-3})


@pytest.mark.parametrize("ahead", [1, 4, 50])
def test_feed_gives_each_indexed_batch_in_order(config, ahead):
    batches = PackedBatches(load_corpus(config, progress=False), config)
    indices = [5, 0, 9, 9, 2, 7]
    fed = list(feed(batches, indices, torch.device("cpu"), ahead=ahead))
    assert len(fed) == len(indices)
    for index, batch in zip(indices, fed, strict=True):
        for got, expected in zip(batch.tensors(), batches[index].tensors(), strict=True):
            assert torch.equal(got, expected)


@pytest.mark.parametrize(
    "objective,decoder_loss,document_mask",
    [
        ("encoder", "causal", True),
        ("decoder", "causal", True),
        ("decoder", "causal", False),
        ("decoder", "masked", True),
    ],
)
def test_every_batch_tensor_owns_its_memory_so_it_can_be_pinned(
    config, objective, decoder_loss, document_mask
):
    """pin_memory (the CUDA feed) refuses a tensor whose elements share memory (an ``expand``ed view)."""
    config = make_config(
        config.to_dict(),
        {"objective": objective, "decoder_loss": decoder_loss, "document_mask": document_mask},
    )
    batch = PackedBatches(load_corpus(config, progress=False), config)[0]
    for tensor in batch.tensors():
        assert 0 not in tensor.stride() or tensor.numel() <= 1


def test_feed_can_stop_early_and_groups_follow_the_steps(config):
    batches = PackedBatches(load_corpus(config, progress=False), config)
    stream = feed(batches, range(1000), torch.device("cpu"))
    first = next(stream)
    stream.close()  # the loop left early (stop_at): the background thread ends with it
    assert torch.equal(first.input_ids, batches[0].input_ids)
    assert [len(g) for g in grouped(iter(range(7)), 3)] == [3, 3, 1]
    assert list(micro_batch_indices(config, range(1, 3), rank=1, world=2)) == [5, 7, 9, 11]


def test_head_logits_match_the_models_own_head_on_an_unaligned_vocabulary():
    torch.manual_seed(0)
    model = build_model(make_config(TINY), vocab_size=301)  # 301 is not a multiple of 64
    with torch.no_grad():
        model.cls.predictions.decoder.bias.normal_()
    hidden = torch.randn(2, 7, 32)
    torch.testing.assert_close(head_logits(model, hidden), model.cls(hidden), rtol=1e-6, atol=1e-6)


def run_steps(config, compile: bool) -> list[tuple[float, float]]:
    config = make_config(config.to_dict(), {"compile": compile})
    batches = PackedBatches(load_corpus(config, progress=False), config)
    torch.manual_seed(0)
    model = build_model(config, batches.corpus.vocab_size)
    cpu = torch.device("cpu")
    step = TrainStep(model, make_optimizer(model, config, cpu), config, cpu)
    fed = feed(batches, micro_batch_indices(config, range(config.steps), 0, 1), cpu)
    out = []
    for number, group in enumerate(grouped(fed, config.grad_accum)):
        losses = step(group, learning_rate(config, number))
        out.append((float(losses.loss), float(losses.grad_norm)))
    return out


@pytest.mark.slow
def test_compiled_step_trains_like_the_eager_step(config):
    """torch.compile of the whole loss (documents, gather, padded head, cross-entropy), float32, no dropout."""
    eager, compiled = run_steps(config, compile=False), run_steps(config, compile=True)
    assert len(eager) == config.steps
    assert eager[-1][0] < eager[0][0]  # it learns
    torch.testing.assert_close(torch.tensor(compiled), torch.tensor(eager), rtol=1e-4, atol=1e-5)


def test_cuda_graphs_for_one_process_on_a_cuda_gpu():
    cuda, cpu = torch.device("cuda"), torch.device("cpu")
    assert compile_mode(cuda, world=1) == "reduce-overhead"  # also with several micro-batches a step
    assert compile_mode(cuda, world=2) == "default"
    assert compile_mode(cpu, world=1) == "default"


def test_gradients_taken_out_after_each_micro_batch_step_like_gradients_summed_in_place(config):
    """The accumulation that CUDA graphs need (each micro-batch's gradients moved into buffers of the
    step's own) updates the model as summing into ``.grad`` does; run eagerly here, where both can run."""
    corpus = load_corpus(config, progress=False)
    batches = PackedBatches(corpus, config)
    weights = []
    for taken_out in (False, True):
        torch.manual_seed(0)
        model = build_model(config, corpus.vocab_size).train()
        step = TrainStep(
            model, make_optimizer(model, config, torch.device("cpu")), config, torch.device("cpu")
        )
        step.graphs = taken_out
        for number in range(3):
            step([batches[2 * number], batches[2 * number + 1]], lr=1e-3)
        weights.append(torch.cat([p.detach().flatten() for p in model.parameters()]))
    assert not torch.equal(
        weights[0], torch.cat([p.flatten() for p in build_model(config, corpus.vocab_size).parameters()])
    )
    torch.testing.assert_close(weights[1], weights[0], rtol=1e-5, atol=1e-6)


def test_a_tensor_learning_rate_is_filled_in_place_and_a_float_one_replaced():
    """A CUDA graph reads a tensor rate from its memory, so the step must write into that tensor, not swap it."""
    weight = torch.nn.Parameter(torch.ones(2))
    rate = torch.tensor(1e-3)
    optimizer = torch.optim.AdamW(
        [{"params": [weight], "lr": rate}, {"params": [torch.nn.Parameter(torch.ones(1))]}]
    )
    set_learning_rate(optimizer, 2.5e-4)
    first, second = optimizer.param_groups
    assert first["lr"] is rate and rate.item() == pytest.approx(2.5e-4)
    assert second["lr"] == 2.5e-4


def updated(config, captured: bool, updates: int = 5) -> tuple[list[float], torch.Tensor]:
    """Gradient norms of ``updates`` updates of two micro-batches each on the CPU, and the weights after."""
    corpus = load_corpus(config, progress=False)
    batches = PackedBatches(corpus, config)
    torch.manual_seed(0)
    model = build_model(config, corpus.vocab_size).train()
    optimizer = make_optimizer(model, config, torch.device("cpu"))
    step = TrainStep(model, optimizer, config, torch.device("cpu"))
    if captured:  # as TrainStep sets it up where the loss runs as CUDA graphs
        step.captured = CapturedUpdate(model, optimizer, config)
    norms = [
        float(step([batches[2 * n], batches[2 * n + 1]], learning_rate(config, n)).grad_norm)
        for n in range(updates)
    ]
    return norms, torch.cat([p.detach().flatten() for p in model.parameters()])


def test_the_captured_update_moves_the_model_as_the_eager_update(config):
    """``update_graph``'s update (clip + AdamW on gradient buffers of its own; off CUDA it runs them eagerly,
    where nothing is captured) computes what ``apply_update``'s eager clip and AdamW compute, over updates
    whose rate changes and whose clipping bites: a buffer left stale by a missed copy would show."""
    config = make_config(config.to_dict(), {"grad_clip": 0.05, "warmup_steps": 3})
    (eager_norms, eager), (captured_norms, captured) = updated(config, False), updated(config, True)
    assert max(eager_norms) > 0.05 and len(set(eager_norms)) == len(eager_norms)  # clipped, and learning
    assert CAPTURE_AFTER < len(eager_norms)
    torch.testing.assert_close(torch.tensor(captured_norms), torch.tensor(eager_norms), rtol=1e-5, atol=1e-7)
    torch.testing.assert_close(captured, eager, rtol=1e-5, atol=1e-7)


def test_the_captured_update_refuses_gradients_it_did_not_record(config):
    """A graph recorded over the first update's gradients would leave out a parameter that gets one later:
    refused, not skipped."""
    layer = torch.nn.Linear(3, 2)
    optimizer = torch.optim.AdamW(layer.parameters(), lr=1e-3)
    update = CapturedUpdate(layer, optimizer, config)
    layer.weight.grad = torch.ones_like(layer.weight)
    update()
    layer.weight.grad, layer.bias.grad = torch.ones_like(layer.weight), torch.ones_like(layer.bias)
    with pytest.raises(RuntimeError, match="update_graph: the parameters with gradients changed"):
        update()


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_the_captured_update_trains_as_the_eager_one_on_a_cuda_gpu(config):
    """On a GPU, with the loss as CUDA graphs: the recorded update (the default, ``update_graph`` None; from
    update CAPTURE_AFTER + 1 on) gives the losses of the eager one (``false``), to float32 rounding (no
    autocast here; kernels' summation orders may differ between the two)."""
    cuda = torch.device("cuda")
    losses = []
    for graph in (False, None):
        run = make_config(
            config.to_dict(), {"device": "cuda", "compile": True, "update_graph": graph, "steps": 8}
        )
        batches = PackedBatches(load_corpus(run, progress=False), run)
        torch.manual_seed(0)
        model = build_model(run, batches.corpus.vocab_size).to(cuda).train()
        step = TrainStep(model, make_optimizer(model, run, cuda), run, cuda)
        assert (step.captured is not None) == (graph is None)
        fed = feed(batches, micro_batch_indices(run, range(run.steps), 0, 1), cuda)
        losses.append(
            [float(step(g, learning_rate(run, n)).loss) for n, g in enumerate(grouped(fed, run.grad_accum))]
        )
    assert step.captured.graph is not None and len(losses[1]) == 8
    torch.testing.assert_close(torch.tensor(losses[1]), torch.tensor(losses[0]), rtol=1e-3, atol=1e-3)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_a_checkpoint_of_the_recorded_update_resumes_as_the_run_that_went_on_on_a_cuda_gpu(config, tmp_path):
    """The recorded update keeps AdamW capturable, its rates and steps in device memory. A checkpoint taken
    after the graph is recorded loads into a fresh model, optimizer and step, which record a graph of
    their own and go on with the losses of the run that was not stopped, to float32 rounding."""
    cuda = torch.device("cuda")
    run = make_config(config.to_dict(), {"device": "cuda", "compile": True, "steps": 10})
    batches = PackedBatches(load_corpus(run, progress=False), run)
    fed = feed(batches, micro_batch_indices(run, range(run.steps), 0, 1), cuda)
    updates = list(grouped(fed, run.grad_accum))
    stop, path = CAPTURE_AFTER + 2, tmp_path / "state.pt"

    def started() -> tuple[torch.nn.Module, torch.optim.Optimizer]:
        torch.manual_seed(0)
        model = build_model(run, batches.corpus.vocab_size).to(cuda).train()
        return model, make_optimizer(model, run, cuda)

    def losses(step: TrainStep, steps: range) -> list[float]:
        return [float(step(updates[n], learning_rate(run, n)).loss) for n in steps]

    model, optimizer = started()
    step = TrainStep(model, optimizer, run, cuda)
    went_on = losses(step, range(stop))
    assert step.captured is not None and step.captured.graph is not None
    with CheckpointWriter() as checkpoints:
        checkpoints.save(path, model.state_dict(), optimizer.state_dict(), stop, 0.0, cuda)
    went_on += losses(step, range(stop, run.steps))
    model, optimizer = started()
    assert load_checkpoint(path, model, optimizer, cuda, run.steps)[0] == stop
    step = TrainStep(model, optimizer, run, cuda)
    resumed = losses(step, range(stop, run.steps))
    assert step.captured.graph is not None  # recorded again after the resume
    assert len(set(went_on)) == len(went_on)  # learning, so a stale state would show
    torch.testing.assert_close(torch.tensor(resumed), torch.tensor(went_on[stop:]), rtol=1e-4, atol=1e-4)
