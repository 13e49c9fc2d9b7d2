"""The profiling benchmark runs the CLI's training step on ``config/paper.yaml``'s defaults: here, for real, on
the CPU with a tiny model, for two updates."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from attngeom.training.tokenizer import bert_uncased_tokenizer

ROOT = Path(__file__).parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))  # the benchmarks import their siblings by name

import paper_setting  # noqa: E402
import profile_training  # noqa: E402

TINY = (
    "compile=false",
    "hidden_size=32",
    "n_heads=4",
    "intermediate_size=64",
    "seq_len=64",
    "batch_documents=16",
)


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    """What ``bench_training.py prepare`` writes: paragraphs, one a line, and BERT's uncased tokenizer."""
    folder = tmp_path_factory.mktemp("bench-cache")
    words = "the nation congress people union states peace law trade year work our".split()
    lines = [" ".join(words[(i + k) % len(words)] for k in range(3 + i % 40)) for i in range(200)]
    (folder / "sotu_paragraphs.txt").write_text("\n".join(lines) + "\n")
    bert_uncased_tokenizer().save(str(folder / "tokenizer.json"))
    return folder


def test_the_profile_prints_time_by_category_for_the_paper_defaults(cache, tmp_path, capsys):
    argv = ["--device", "cpu", "--layers", "2", "--warmup", "1", "--updates", "1", "--cache", str(cache)]
    argv += [f"--set={s}" for s in TINY] + ["--out", str(tmp_path / "profile.json")]
    result = profile_training.main(argv)
    printed = capsys.readouterr().out
    assert "tokens/s" in printed and "top 15 kernels" in printed
    assert {"matrix products", "elementwise / normalisation"} <= set(result["ms_by_category"])
    for kind in result["ms_by_category"]:
        assert kind in printed
    assert result["tokens_per_s"] > 0 and len(result["top_kernels"]) == 15
    recorded = result["settings"]
    assert recorded["recipe"] == paper_setting.paper_defaults()["recipe"] == "authors_code"
    assert recorded["n_layers"] == 2 and recorded["hidden_size"] == 32 and recorded["device"] == "cpu"
    assert recorded["masking"] == "bernoulli" and recorded["batch_size"] is None  # paper.yaml's, as the CLI
    assert (tmp_path / "profile.json").exists()


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
    assert profile_training.category("triton_red_fused_native_layer_norm_7") == "elementwise / normalisation"
    assert profile_training.category("Memcpy HtoD (Pinned -> Device)") == "copies / data"
