"""The paper's training claims against what the runs measured: one row per claim and group of runs
(dataset, depth), "agrees" only where every seed says so, "disagrees" where every seed says the opposite,
else "mixed"; a claim the runs cannot test says why. Filled from the runs' score logs (the last scored
step, layer form Σ_h M_h) and Table 1 (``speedup.summarise``)."""

from __future__ import annotations

import numpy as np
import pandas as pd

TITLE = "The paper's training claims, measured here"
CAPTION = (
    "Each claim of the paper (Section 4, Figures 3 and S5, Table 1) against these runs, per dataset and "
    "depth: the measured values per seed at the last scored step (layer form Σ_h M_h: median over layers, "
    "or per layer), and whether they agree. 'agrees' only when every seed agrees, 'disagrees' when every "
    "seed says the opposite, else 'mixed'. The speed-up claim uses Table 1's test (alpha 0.05)."
)


def _final(scores: pd.DataFrame) -> pd.DataFrame:
    """Layer-form rows of each run's last scored step."""
    forms = scores[scores["head"].isna() & (scores["reg_weight"] == 0)]
    last = forms.groupby("run")["step"].transform("max")
    return forms[forms["step"] == last]


def _verdict(signs: list[bool | None]) -> str:
    known = [s for s in signs if s is not None]
    if not known:
        return "not measured"
    return "agrees" if all(known) else "disagrees" if not any(known) else "mixed"


def median(rows: pd.DataFrame, metric: str = "symmetry") -> float:
    return float(rows[metric].median())


def _per_seed(frame: pd.DataFrame, value) -> dict[int, float]:
    return {int(seed): float(value(rows)) for seed, rows in frame.groupby("seed")}


def _row(group: tuple, claim: str, measured: str, verdict: str) -> dict[str, object]:
    dataset, layers = group
    return {"dataset": dataset, "layers": layers, "claim": claim, "measured": measured, "verdict": verdict}


def _above(group: tuple, claim: str, first: pd.DataFrame, second: pd.DataFrame) -> dict[str, object]:
    """The claim that ``first``'s median symmetry ends above ``second``'s, seed by seed."""
    a, b = _per_seed(first, median), _per_seed(second, median)
    seeds = sorted(set(a) & set(b))
    measured = "; ".join(f"s{s} {a[s]:+.2f} vs {b[s]:+.2f}" for s in seeds)
    return _row(group, claim, measured, _verdict([a[s] > b[s] for s in seeds]))


def _numbers(values: dict[int, float]) -> str:
    return ", ".join(f"s{seed} {v:+.2f}" for seed, v in sorted(values.items()))


def claims(scores: pd.DataFrame, table: pd.DataFrame) -> pd.DataFrame:
    """The claims table from the runs' scores (``figures.load_runs``) and Table 1."""
    final = _final(scores)
    rows = []
    for group, runs in final.groupby(["dataset", "layers"]):
        random = runs[runs["init"] == "random"]
        enc, dec = (random[random["objective"] == o] for o in ("encoder", "decoder"))
        if len(enc) and len(dec):
            rows.append(_above(group, "encoders end more symmetric than decoders (random init)", enc, dec))
        if len(dec):
            d = _per_seed(dec, lambda rows: median(rows, "directionality"))
            rows.append(
                _row(
                    group,
                    "decoders: negative directionality (column-dominant)",
                    _numbers(d),
                    _verdict([v < 0 for v in d.values()]),
                )
            )
        if len(enc):
            slope = _per_seed(enc, lambda rows: np.polyfit(rows["layer"], rows["symmetry"], 1)[0])
            rows.append(
                _row(
                    group,
                    "encoders: later layers more symmetric (slope of symmetry over layer index)",
                    _numbers(slope),
                    _verdict([v > 0 for v in slope.values()]),
                )
            )
        symmetric = runs[(runs["init"] == "symmetric") & (runs["objective"] == "encoder")]
        if len(enc) and len(symmetric):
            claim = "symmetric init ends more symmetric than random init (encoders, Figure S5b)"
            rows.append(_above(group, claim, symmetric, enc))
    rows += _speedup_rows(table)
    return pd.DataFrame(rows, columns=["dataset", "layers", "claim", "measured", "verdict"])


def _speedup_rows(table: pd.DataFrame) -> list[dict[str, object]]:
    """Table 1's symmetric encoder rows: the speed-up claim, by its test."""
    sym = table[
        (table["init"] == "symmetric") & (table["reg_weight"] == 0) & (table["objective"] == "encoder")
    ]
    rows = []
    for r in sym.itertuples(index=False):
        if r.seed_pairs < 2:
            measured, verdict = f"speed-up {r.speedup_robust:.1f} % over one seed: no test", "not tested"
        else:
            measured = f"signed speed-up {r.signed:.1f} % over {r.seed_pairs} seeds, p = {r.p_value:.3f}, MDE {r.mde:.1f} %"
            excluded = f" (effects ≥ {r.mde:.0f} % excluded at 80% power)" if r.mde == r.mde else ""
            verdict = {"faster than seed noise": "agrees", "slower than seed noise": "disagrees"}.get(
                r.verdict, f"not shown{excluded}"
            )
        rows.append(
            _row(
                (r.dataset, r.layers),
                "symmetric init speeds up training (encoders, Table 1)",
                measured,
                verdict,
            )
        )
    return rows
