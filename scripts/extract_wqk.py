"""Rule heatmap_matrix: the dense W_qk = W_q W_kᵀ of one small layer, for a heatmap panel of Figure 2.

The only place the d × d matrix is formed (scoring never does); refused above ``max_dim``. A model
that cannot be read records the reason instead, as the score rule does.
"""

import numpy as np
import torch

from attngeom.architectures import architecture_for
from attngeom.errors import InputError
from attngeom.files import atomic_path
from attngeom.pipeline.outcome import portable
from attngeom.sources import open_source


def layer_matrix(location: str, revision: str | None, layer: int, max_dim: int) -> np.ndarray:
    source = open_source(location, revision=revision)
    for item in architecture_for(source.config).layers(source.config, source):
        if item.layer == layer and "cross" not in item.stack:
            d = item.w_q.shape[0]
            if d > max_dim:
                raise InputError(f"d = {d} is above heatmap_max_dim = {max_dim}; pick a smaller layer")
            w_q, w_k = item.w_q.to(torch.float64), item.w_k.to(torch.float64)
            group = item.n_heads // item.n_kv_heads
            w_k = w_k.reshape(d, item.n_kv_heads, 1, item.head_dim).expand(-1, -1, group, -1).reshape(d, -1)
            return (w_q @ w_k.T).numpy()
    raise InputError(f"no self-attention layer {layer}")


p = snakemake.params
with open(snakemake.log[0], "w") as log:
    try:
        matrix, reason = layer_matrix(p.location, p.revision, p.layer, p.max_dim), ""
    except InputError as err:
        matrix, reason = np.zeros((0, 0)), portable(str(err), {p.location: p.model})
        log.write(f"attngeom: error: {reason}\n")
with atomic_path(snakemake.output[0]) as temporary:
    np.savez_compressed(temporary, matrix=matrix, reason=np.array(reason), title=np.array(p.title))
