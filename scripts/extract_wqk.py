"""Rule heatmap_matrix: the dense W_qk = W_q W_kᵀ of one small layer, for a heatmap panel of Figure 2.

The layer is the config's, or else the model's most representative one (``score_figures.representative_layer``
on its scores: symmetry for the encoder panel, directionality for the decoder panel, as Figure 2's rows
a and b). The only place the d × d matrix is formed (scoring never does); refused above ``max_dim``. A
model that cannot be read records the reason instead, as the score rule does.
"""

from attngeom.pipeline.job_log import to_rule_log

to_rule_log(snakemake.log[0])

import sys

import numpy as np
import torch

from attngeom.architectures import architecture_for
from attngeom.errors import InputError
from attngeom.files import atomic_path
from attngeom.pipeline.outcome import portable
from attngeom.report.score_figures import representative_layer
from attngeom.report.summary import model_records
from attngeom.sources import open_source

METRIC = {"encoder": "symmetry", "decoder": "directionality"}
"""The score a panel's layer is chosen by: Figure 2 shows symmetry in row a, directionality in row b."""


def layer_matrix(
    location: str, revision: str | None, stack: str | None, layer: int, max_dim: int
) -> np.ndarray:
    """W_qk of self-attention layer ``layer`` of ``stack`` (None: the first stack that has it)."""
    source = open_source(location, revision=revision)
    for item in architecture_for(source.config).layers(source.config, source):
        if item.layer == layer and "cross" not in item.stack and stack in (None, item.stack):
            d = item.w_q.shape[0]
            if d > max_dim:
                raise InputError(f"d = {d} is above heatmap_max_dim = {max_dim}; pick a smaller layer")
            w_q, w_k = item.w_q.to(torch.float64), item.w_k.to(torch.float64)
            group = item.n_heads // item.n_kv_heads
            w_k = w_k.reshape(d, item.n_kv_heads, 1, item.head_dim).expand(-1, -1, group, -1).reshape(d, -1)
            return (w_q @ w_k.T).numpy()
    raise InputError(f"no self-attention layer {layer}")


def chosen_layer(p, role: str) -> tuple[str | None, int, str]:
    """(stack, layer, panel title): the config's layer, else the model's most representative one."""
    if p.layer is not None:
        return None, p.layer, f"{p.display}, layer {p.layer} (set in the config)"
    status, scores = model_records(p.model, snakemake.input.scores, snakemake.input.status)
    if status["status"] != "ok":
        raise InputError(f"not scored: {status['reason']}")
    metric = METRIC[role]
    stack, layer, value, median = representative_layer(scores, metric)
    title = f"{p.display}, {stack} layer {layer}: the most representative layer\n({metric} {value:.2f}; median over layers {median:.2f})"
    return stack, layer, title


p = snakemake.params
title = p.display
try:
    stack, layer, title = chosen_layer(p, snakemake.wildcards.role)
    matrix, reason = layer_matrix(p.location, p.revision, stack, layer, p.max_dim), ""
    print(f"heatmap_matrix: {p.model}: {title.splitlines()[0]}, W_qk {matrix.shape[0]} x {matrix.shape[1]}")
except InputError as err:
    matrix, reason = np.zeros((0, 0)), portable(str(err), {p.location: p.model})
    print(f"attngeom: error: {reason}", file=sys.stderr)
with atomic_path(snakemake.output[0]) as temporary:
    np.savez_compressed(temporary, matrix=matrix, reason=np.array(reason), title=np.array(title))
