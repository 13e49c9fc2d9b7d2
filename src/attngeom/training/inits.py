"""The init arms of the training experiment, each declared once: its name, how it initialises the attention,
what it is compared with and what that comparison measures, and how tables and figures draw it.

Every consumer reads this table, never a list of names of its own: the setting's choices (``TrainConfig.init``
and the workflow's settings schema made from it), what the model does (``model.init_attention``), which runs
are compared and what each comparison is called (``runstats.pairing``, Table 1 and its legend, the claims),
the figures' colours, lines and markers (``report.training_figures``, ``report.score_figures``), the
paper's training grid (``pipeline.paper_config``) and what a run does otherwise than the authors' code
(``runs.paper_differences``). A new arm is one more ``InitArm`` here; docs/architecture.md says what else.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal


@dataclass(frozen=True)
class Comparison:
    """An arm timed against another of the same seed (Table 1, Figure S5), and what their difference
    measures."""

    reference: str
    effect: str


@dataclass(frozen=True)
class InitArm:
    name: str
    """The value of the ``init`` setting."""
    how: str
    """How it initialises q, k and v, in a few words (the legends, the settings' documentation)."""
    fresh_linear: bool
    """q, k and v (weights and biases) re-drawn as a fresh ``nn.Linear`` would be (PyTorch's default:
    kaiming-uniform weights U(±1/√d), std 1/√(3d), uniform biases), as the authors'
    ``BertSelfAttentionSymmetricInit`` does; otherwise BERT's own init (N(0, 0.02), zero biases)."""
    key: Literal["own", "query", "skew"]
    """Every head's W_k, after that: its own draw, W_q itself (a symmetric W_qk), or W_q Sᵀ with S
    skew-symmetric (a skew-symmetric W_qk)."""
    compared_with: tuple[Comparison, ...]
    """The arms it is timed against, with what each comparison measures."""
    colour: str
    line: str
    """Matplotlib line style of its curves."""
    marker: str
    """Matplotlib marker of its runs: a trained model in Figures 2/S1/S2, the loss lines of Figure S5."""
    group: Literal["reference", "authors", "decomposition", "extra"]
    """Its place in the experiment: the arm every other one is compared with; the authors' symmetric init;
    the two arms that take the authors' init apart into init scale and symmetry; an arm beyond the
    paper's grid."""
    papers_name: str | None = None
    """What the paper and the authors' code call it, for an arm they ran (their Table 1's rows)."""

    @property
    def symmetric(self) -> bool:
        """Whether every head starts with a symmetric W_qk."""
        return self.key == "query"


ARMS: tuple[InitArm, ...] = (
    InitArm(
        "random",
        "BERT's init: N(0, 0.02) weights, zero biases",
        fresh_linear=False,
        key="own",
        compared_with=(),
        colour="lightskyblue",
        line="--",
        marker="^",
        group="reference",
        papers_name="random",
    ),
    InitArm(
        "symmetric",
        "W_k = W_q at BERT's init",
        fresh_linear=False,
        key="query",
        compared_with=(Comparison("random", "symmetry alone (W_k = W_q at BERT's init)"),),
        colour="navy",
        line="-",
        marker="*",
        group="decomposition",
    ),
    InitArm(
        "torch_default",
        "q, k, v re-drawn as fresh nn.Linear layers (PyTorch's default init)",
        fresh_linear=True,
        key="own",
        compared_with=(Comparison("random", "init scale alone (PyTorch's default q/k/v)"),),
        colour="darkorange",
        line="-.",
        marker="v",
        group="decomposition",
    ),
    InitArm(
        "torch_default_symmetric",
        "q, k, v re-drawn as fresh nn.Linear layers, then W_k = W_q (the authors' symmetric init)",
        fresh_linear=True,
        key="query",
        compared_with=(
            Comparison("random", "scale and symmetry (the authors' symmetric init)"),
            Comparison("torch_default", "symmetry at the authors' scale"),
        ),
        colour="darkred",
        line="-",
        marker="P",
        group="authors",
        papers_name="symmetric",
    ),
    InitArm(
        "skew",
        "W_k = W_q Sᵀ, S skew-symmetric, at BERT's init",
        fresh_linear=False,
        key="skew",
        compared_with=(Comparison("random", "skew-symmetry (W_k = W_q Sᵀ at BERT's init)"),),
        colour="tab:green",
        line=":",
        marker="X",
        group="extra",
    ),
)
"""Every arm, in the order tables and figures list them."""

ARM: dict[str, InitArm] = {arm.name: arm for arm in ARMS}
INITS: tuple[str, ...] = tuple(ARM)
"""The values of the ``init`` setting."""
REFERENCE: str = next(arm.name for arm in ARMS if arm.group == "reference")
"""The init every other arm is compared with (the setting's default)."""
AUTHORS: str = next(arm.name for arm in ARMS if arm.group == "authors")
"""The authors' ``--symmetric-init`` in our terms (the paper's "symmetric" rows)."""
SYMMETRIC: tuple[str, ...] = tuple(arm.name for arm in ARMS if arm.symmetric)
"""The inits whose every head starts with a symmetric W_qk."""
PAPER_GRID: tuple[str, ...] = tuple(arm.name for arm in ARMS if arm.group != "extra")
"""The arms of the paper's training grid as the authors' code ran it: theirs, and the two that separate
init scale from symmetry."""
EFFECTS: dict[tuple[str, str], str] = {
    (arm.name, c.reference): c.effect for arm in ARMS for c in arm.compared_with
}
"""(candidate init, reference init) → what their comparison measures, in the order of ``ARMS``."""


def init_arm(name: str) -> InitArm:
    """The arm ``name``; an unknown one is an error naming the known ones."""
    if name not in ARM:
        raise ValueError(f"unknown init {name!r}; known: {', '.join(INITS)}")
    return ARM[name]
