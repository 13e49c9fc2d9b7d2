"""The kernel-ceilings benchmark measures at the shapes the paper's presets train with, and refuses a
machine without CUDA in one line."""

from __future__ import annotations

import kernel_ceilings  # benchmarks/, on the import path through tests/bench_support.py
import paper_setting
import pytest
import torch

from attngeom.training.config import make_config


@pytest.mark.parametrize("layers", sorted(kernel_ceilings.PRESETS))
def test_its_presets_are_the_paper_models_sizes(layers):
    config = make_config(paper_setting.paper_defaults() | {"n_layers": layers})
    assert kernel_ceilings.PRESETS[layers] == (config.hidden, config.heads)


@pytest.mark.skipif(torch.cuda.is_available(), reason="the refusal of a machine without CUDA")
def test_it_refuses_a_machine_without_cuda():
    with pytest.raises(SystemExit, match="needs a CUDA GPU"):
        kernel_ceilings.main([])
