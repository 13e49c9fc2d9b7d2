"""The profiling benchmark runs the CLI's training step on ``config/paper.yaml``'s defaults: here, for real, on
the CPU with a tiny model, for two updates."""

from __future__ import annotations

import json
import pstats

import paper_setting  # benchmarks/, on the import path through tests/bench_support.py
import profile_training
import pytest
from bench_support import TINY_MODEL

TINY = (*TINY_MODEL, "batch_documents=16")


def test_the_profile_prints_time_by_category_for_the_paper_defaults(bench_cache, tmp_path, capsys):
    argv = ["--device", "cpu", "--layers", "2", "--warmup", "1", "--updates", "1"]
    argv += ["--cache", str(bench_cache), "--out", str(tmp_path / "profile.json")]
    argv += ["--host-profile", str(tmp_path / "host.prof"), "--trace", str(tmp_path / "trace.json")]
    argv += [f"--set={s}" for s in TINY]
    result = profile_training.main(argv)
    printed = capsys.readouterr().out
    assert "tokens/s" in printed and "top 15 kernels" in printed
    assert {"matrix products", "elementwise / normalisation"} <= set(result["ms_by_category"])
    for kind in result["ms_by_category"]:
        assert kind in printed
    assert result["tokens_per_s"] > 0 and len(result["top_kernels"]) == 15
    assert (
        result["host_feed_wait_ms"] >= 0
        and result["host_step_call_ms"] > 0
        and "waiting for the feed" in printed
    )
    recorded = result["settings"]
    assert recorded["recipe"] == paper_setting.paper_defaults()["recipe"] == "authors_code"
    assert recorded["n_layers"] == 2 and recorded["hidden_size"] == 32 and recorded["device"] == "cpu"
    assert recorded["masking"] == "bernoulli" and recorded["batch_size"] is None  # paper.yaml's, as the CLI
    assert (tmp_path / "profile.json").exists()
    # the profiled updates' Chrome trace; where a GPU sat idle is read from it on a GPU only
    events = json.loads((tmp_path / "trace.json").read_text())["traceEvents"]
    assert any(e.get("cat") == "cpu_op" and e["name"] == "aten::addmm" for e in events)
    assert result["device_idle"] == {}
    # the host's time by function: the step's call is among the callers, each list sorted by its own key
    stats = pstats.Stats(str(tmp_path / "host.prof"))
    assert any(name == "__call__" and file.endswith("step.py") for file, _, name in stats.stats)
    for key, rows in result["host_top_functions"].items():
        assert len(rows) == 15 and [r[key] for r in rows] == sorted((r[key] for r in rows), reverse=True)
        assert all(r["cumulative_ms"] >= r["own_ms"] >= 0 and r["calls"] > 0 for r in rows)
    assert "by cumulative_ms" in printed and "by own_ms" in printed
    step_call = next(
        r
        for r in result["host_top_functions"]["cumulative_ms"]
        if r["function"].startswith("__call__ (step.py")
    )
    assert step_call["calls"] == 1  # one step call an update


def test_categories_name_the_kernels_of_a_gpu_step():
    assert profile_training.category("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64") == (
        "matrix products"
    )
    assert profile_training.category("pytorch_flash::flash_bwd_dq_dk_dv_loop_seqk_parallel_kernel") == (
        "attention kernels"
    )
    assert profile_training.category("triton_per_fused__log_softmax_nll_loss_3") == (
        "cross-entropy / softmax of the head"
    )
    assert profile_training.category("void at::native::(anonymous)::multi_tensor_apply_kernel") == "optimizer"
    assert profile_training.category("_attention_backward_keys") == "attention kernels"  # attention: blocks
    assert profile_training.category("triton_red_fused_native_layer_norm_7") == "elementwise / normalisation"
    assert profile_training.category("Memcpy HtoD (Pinned -> Device)") == "copies / data"


def test_the_update_graph_candidate_trains_as_the_shipped_update(bench_cache, tmp_path):
    """``--update-graph fused`` (clip + a capturable foreach AdamW, compiled where the step compiles)
    computes the update ``TrainStep`` ships: the same losses, update by update, to float32 rounding."""
    form = "fused"
    argv = [
        "--device",
        "cpu",
        "--layers",
        "2",
        "--warmup",
        "3",
        "--updates",
        "2",
        "--cache",
        str(bench_cache),
    ]
    argv += [f"--set={s}" for s in (*TINY, "lr=1e-3", "warmup_steps=0", "grad_clip=0.5")]  # updates that tell
    shipped = profile_training.main(argv)
    candidate = profile_training.main([*argv, "--update-graph", form])
    assert shipped["update_graph"] is None and candidate["update_graph"] == form
    # the candidate takes the update's place: the step it runs in records no update of its own
    assert shipped["settings"]["update_graph"] is None and candidate["settings"]["update_graph"] is False
    assert len(candidate["losses"]) == len(shipped["losses"]) == 7
    assert len(set(shipped["losses"])) > 1  # the model learns: later losses depend on earlier updates
    assert candidate["losses"] == pytest.approx(shipped["losses"], rel=1e-4)


@pytest.mark.parametrize("objective", ["encoder", "decoder"])
def test_the_flops_an_update_is_counted_with_are_those_torch_counts_in_a_real_pass(objective):
    """``update_flops`` from the shapes against torch's FlopCounterMode over the model's forward and
    backward on the CPU, where SDPA runs as batched products (12 flops a pair and head dimension; the
    count takes 14, the flash kernels' recomputation of the scores included)."""
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    from attngeom.training.config import make_config
    from attngeom.training.model import LanguageModelLoss, build_model

    config = make_config(
        dict(s.split("=") for s in TINY_MODEL) | {"n_layers": 2, "device": "cpu", "objective": objective}
    )
    rows, slots, vocab = 3, 10, 500
    torch.manual_seed(0)
    loss = LanguageModelLoss(build_model(config, vocab))
    documents = torch.zeros(rows, config.seq_len, dtype=torch.int32)
    documents[:, config.seq_len // 3 :] = 1
    batch = (
        torch.randint(5, vocab, (rows, config.seq_len)),
        torch.randint(0, config.seq_len, (rows, slots)),
        torch.randint(0, vocab, (rows, slots)),
        torch.full((rows, slots), 1 / (rows * slots)),
        documents,
    )
    with FlopCounterMode(display=False) as counter:
        loss(*batch)[0].backward()
    counted = {str(op): flops for op, flops in counter.get_flop_counts()["Global"].items()}
    ours = profile_training.update_flops(config, rows, rows * slots, vocab)
    assert ours["matrix products"] == counted["aten.mm"] + counted["aten.addmm"]
    assert ours["attention kernels"] * 12 / 14 == counted["aten.bmm"]
