"""The paper's training claims against what the runs measured: one row per claim and group of runs
(dataset, depth, word pieces or characters), each with its test and that test's error rate.

Claims read from the runs' score logs (the last scored step) are judged seed by seed: "agrees" only where
every seed says so, "disagrees" where every seed says the opposite, else "mixed" (the exact sign test: with
no true difference all n seeds point one way with probability 2/2ⁿ). Claims read from Table 1
(``table1.summarise``: the speed-up and the lower final loss with a symmetric init) are judged by its
t-test at alpha 0.05 and by size: "agrees" only where the test finds the effect and the authors' run of the
same init at the row's horizon (their own runs cut there, ``authors.at_horizon``; one seed) lies in our 95%
prediction interval for one new seed; an effect found but of another size says how it differs, and an init
the authors never ran (one without a ``papers_name``, ``training.inits``) is judged by its direction only."""

from __future__ import annotations

import os

import numpy as np
import pandas as pd

from ..tables.formats import write_table
from ..training.inits import AUTHORS, REFERENCE, SYMMETRIC
from .authors import DATASETS
from .significance import ALPHA, least_exact_p, sign_flip_test, t_test
from .speedup import CLAIM_RULE
from .table1 import FASTER, SLOWER

CAPTION = (
    "Each claim of the paper (Section 4, Figures 3 and S5, Table 1) against these runs, per dataset and "
    "depth: the measured values per seed at the last scored step (layer form Σ_h M_h: median over layers, "
    "or per layer; Figure S5c: the heads' median per layer), and whether they agree. Per-seed claims: "
    "'agrees' only when every seed agrees, 'disagrees' when every seed says the opposite, else 'mixed' "
    "(the exact sign test: with no true difference all n seeds point one way with probability 2/2ⁿ). "
    f"Claims from Table 1 and Figure S5c: the two-sided t-test over seed pairs at alpha {ALPHA:g} (5% false "
    "positives when there is no effect), with the exact sign-flip test beside it (it cannot go below 2/2ⁿ); "
    "'agrees' only where the effect is found and, for the speed-up and the loss gap, the authors' own run "
    "of the same init at the same horizon (one seed) lies in our 95% prediction interval for one new seed "
    "(mean ± t·s·√(1 + 1/n)); inits the authors never ran are judged by direction only."
)
COLUMNS = ["dataset", "layers", "text", "claim", "measured", "test", "verdict"]
TEXT = {False: "word pieces", True: "characters"}


def _final(scores: pd.DataFrame) -> pd.DataFrame:
    """Rows of each unregularised run's last scored step."""
    unregularised = scores[scores["reg_weight"] == 0]
    last = unregularised.groupby("run")["step"].transform("max")
    return unregularised[unregularised["step"] == last]


def _verdict(signs: list[bool | None]) -> str:
    known = [s for s in signs if s is not None]
    if not known:
        return "not measured"
    return "agrees" if all(known) else "disagrees" if not any(known) else "mixed"


def _sign_test(n: int) -> str:
    return f"every seed one way: p = {least_exact_p(n):.3g} under no difference (exact sign test, {n} seeds)"


def median(rows: pd.DataFrame, metric: str = "symmetry") -> float:
    return float(rows[metric].median())


def _per_seed(frame: pd.DataFrame, value) -> dict[int, float]:
    return {int(seed): float(value(rows)) for seed, rows in frame.groupby("seed")}


def _row(group: tuple, claim: str, measured: str, test: str, verdict: str) -> dict[str, object]:
    """One claim of the runs of ``group``: (dataset, layers, trained on characters)."""
    dataset, layers, characters = group
    return dict(
        zip(COLUMNS, (dataset, layers, TEXT[bool(characters)], claim, measured, test, verdict), strict=True)
    )


def _forms(frame: pd.DataFrame) -> pd.DataFrame:
    return frame[frame["head"].isna()]


def _above(group: tuple, claim: str, first: pd.DataFrame, second: pd.DataFrame) -> dict[str, object]:
    """The claim that ``first``'s median layer-form symmetry ends above ``second``'s, seed by seed."""
    a, b = _per_seed(_forms(first), median), _per_seed(_forms(second), median)
    seeds = sorted(set(a) & set(b))
    measured = "; ".join(f"s{s} {a[s]:+.2f} vs {b[s]:+.2f}" for s in seeds)
    return _row(group, claim, measured, _sign_test(len(seeds)), _verdict([a[s] > b[s] for s in seeds]))


def _numbers(values: dict[int, float]) -> str:
    return ", ".join(f"s{seed} {v:+.2f}" for seed, v in sorted(values.items()))


def layer_spread(rows: pd.DataFrame) -> float:
    """How far apart the layers' symmetry lies (Figure S5c): the range over layers of each layer's median
    symmetry over its heads."""
    per_layer = rows[rows["head"].notna()].groupby("layer")["symmetry"].median()
    return float(per_layer.max() - per_layer.min())


def _tested(values: np.ndarray) -> tuple[str, float]:
    """The test column of a paired claim and its t-test p."""
    if len(values) < 2:
        return "one seed pair: no test", np.nan
    p = float(t_test(values))
    return (
        f"t-test over {len(values)} seed pairs, p = {p:.3f} (alpha {ALPHA:g}); sign-flip p = "
        f"{sign_flip_test(values):.4f} (≥ {least_exact_p(len(values)):.4g} with {len(values)} seeds)",
        p,
    )


def _narrower(group: tuple, init: str, candidate: pd.DataFrame, random: pd.DataFrame) -> dict[str, object]:
    """Figure S5c: a symmetric init narrows the spread of symmetry across layers, seed pair by seed pair."""
    a, b = _per_seed(candidate, layer_spread), _per_seed(random, layer_spread)
    seeds = sorted(set(a) & set(b))
    differences = np.array([a[s] - b[s] for s in seeds])
    test, p = _tested(differences)
    measured = "; ".join(f"s{s} {a[s]:.2f} vs {b[s]:.2f}" for s in seeds)
    if not p < ALPHA:
        verdict = "not shown" if p == p else "not tested"
    else:
        verdict = "agrees" if differences.mean() < 0 else "disagrees"
    claim = f"{init} init narrows the spread of symmetry across layers (encoders, Figure S5c)"
    return _row(group, claim, f"range over layers, {init} vs random: {measured}", test, verdict)


def _first(scores: pd.DataFrame) -> pd.DataFrame:
    """Rows of each unregularised run's first scored step (its init, where step 0 was scored)."""
    unregularised = scores[scores["reg_weight"] == 0]
    first = unregularised.groupby("run")["step"].transform("min")
    return unregularised[unregularised["step"] == first]


def _median_abs_directionality(rows: pd.DataFrame) -> float:
    return float(rows["directionality"].abs().median())


def _decoder_rows(group: tuple, dec: pd.DataFrame, start: pd.DataFrame, enc: pd.DataFrame) -> list[dict]:
    """The paper's decoder claims (Section 4, Figure 3) for the random-init decoders ``dec`` of one loss, their
    first scored step ``start`` and the encoders ``enc`` of the group, seed by seed."""
    loss = dec["decoder_loss"].iloc[0] if "decoder_loss" in dec and len(dec) else ""
    who = f"{loss}-loss decoders" if loss else "decoders"
    forms, rows = _forms(dec), []
    if len(enc):
        rows.append(_above(group, f"encoders end more symmetric than {who} (random init)", enc, dec))
    d = _per_seed(forms, lambda r: median(r, "directionality"))
    claim = f"{who}: negative directionality (column-dominant)"
    rows.append(_row(group, claim, _numbers(d), _sign_test(len(d)), _verdict([v < 0 for v in d.values()])))
    if len(enc):
        a, b = (
            _per_seed(forms, _median_abs_directionality),
            _per_seed(_forms(enc), _median_abs_directionality),
        )
        seeds = sorted(set(a) & set(b))
        measured = "; ".join(f"s{s} {a[s]:.2f} vs {b[s]:.2f}" for s in seeds)
        claim = f"{who} end more directional than encoders (median |directionality|, Figure 3b)"
        rows.append(
            _row(group, claim, measured, _sign_test(len(seeds)), _verdict([a[s] > b[s] for s in seeds]))
        )
    begun = _per_seed(_forms(start), _median_abs_directionality)
    ended = _per_seed(forms, _median_abs_directionality)
    seeds = sorted(set(begun) & set(ended))
    if seeds and start["step"].max() < dec["step"].min():
        measured = "; ".join(f"s{s} {begun[s]:.2f} → {ended[s]:.2f}" for s in seeds)
        claim = (
            f"{who}: directionality emerges during training (median |directionality|, init → end; Thm 2.3)"
        )
        grows = [ended[s] > begun[s] for s in seeds]
        rows.append(_row(group, claim, measured, _sign_test(len(seeds)), _verdict(grows)))
    layers = sorted(forms["layer"].unique())
    if len(layers) >= 3:
        middle = forms[forms["layer"].isin(layers[1:-1])]
        m = _per_seed(middle, median)
        claim = f"{who}: middle layers skew-symmetric (median symmetry of the inner layers < 0, Figure 3c)"
        rows.append(
            _row(group, claim, _numbers(m), _sign_test(len(m)), _verdict([v < 0 for v in m.values()]))
        )
    slope = _per_seed(forms, lambda r: np.polyfit(r["layer"], r["directionality"].abs(), 1)[0])
    claim = f"{who}: later layers more directional (slope of |directionality| over layer index, Figure 3d)"
    rows.append(
        _row(group, claim, _numbers(slope), _sign_test(len(slope)), _verdict([v > 0 for v in slope.values()]))
    )
    return rows


def claims(scores: pd.DataFrame, table: pd.DataFrame) -> pd.DataFrame:
    """The claims table from the runs' scores (``load_runs``) and Table 1."""
    final, first = _final(scores), _first(scores)
    rows = []
    for group, runs in final.groupby(["dataset", "layers", "characters"]):
        random = runs[runs["init"] == REFERENCE]
        enc, dec = (random[random["objective"] == o] for o in ("encoder", "decoder"))
        losses = dec["decoder_loss"] if "decoder_loss" in dec else pd.Series("", index=dec.index)
        for _, one in dec.groupby(losses):
            start = first[first["run"].isin(set(one["run"]))]
            rows += _decoder_rows(group, one, start, enc)
        if len(enc):
            slope = _per_seed(_forms(enc), lambda rows: np.polyfit(rows["layer"], rows["symmetry"], 1)[0])
            claim = "encoders: later layers more symmetric (slope of symmetry over layer index)"
            found = _verdict([v > 0 for v in slope.values()])
            rows.append(_row(group, claim, _numbers(slope), _sign_test(len(slope)), found))
        for init in SYMMETRIC:
            symmetric = runs[(runs["init"] == init) & (runs["objective"] == "encoder")]
            if len(enc) and len(symmetric):
                claim = f"{init} init ends more symmetric than random init (encoders, Figure S5b)"
                rows.append(_above(group, claim, symmetric, enc))
                rows.append(_narrower(group, init, symmetric, enc))
    rows += _table_rows(table)
    return pd.DataFrame(rows, columns=COLUMNS)


def write_claims(
    scores: pd.DataFrame, table: pd.DataFrame, stem: str | os.PathLike, title: str, note: str = ""
) -> None:
    """The claims of these runs as ``stem``.csv, .md, .tex and .html under ``title`` (the pipeline's:
    ``attngeom.artifacts``); ``note``: a sentence added to the caption (which runs' evolution other scoring
    code computed)."""
    found = claims(scores, table)
    caption = " ".join(filter(None, [CAPTION, note]))
    write_table(found, stem, title, csv=found, caption=caption, empty="No run.")


def _authors_values(row: pd.Series, kind: str) -> dict[str, float]:
    """The authors' value of ``kind`` (the claim rule's speed-up, or ``gap``) at the row's horizon, per
    counterpart dataset."""
    found = {d: row.get(f"authors_{d}_{kind}") for d in DATASETS}
    return {d: float(v) for d, v in found.items() if v is not None and pd.notna(v)}


def _sized(found: bool, row: pd.Series, name: str, kind: str, unit: str) -> str:
    """The verdict of a claim whose effect the test ``found``: "agrees" only where the authors' run of this
    same init, cut at this horizon, lies where one more seed of ours would fall (the 95% prediction
    interval of ``name``: theirs is one seed, so our mean's confidence interval is the wrong yardstick)."""
    if not found:
        return ""
    if row["init"] != AUTHORS:
        return f"direction only: the authors ran no {row['init']} init to size it against (theirs: {AUTHORS})"
    theirs = _authors_values(row, kind)
    if not theirs:
        return "direction only: no authors' run of this depth and objective to size it against"
    low, high = row[f"{name}_pred_low"], row[f"{name}_pred_high"]
    outside = {d: v for d, v in theirs.items() if not low <= v <= high}
    if not outside:
        return "agrees"
    said = ", ".join(f"{d} {v:.2f}{unit}" for d, v in outside.items())
    return (
        f"direction only: the authors' run at this horizon ({said}) lies outside [{low:.2f}, {high:.2f}], "
        "where one more seed of ours would fall (95% prediction interval)"
    )


def _exact(row: pd.Series, name: str, n: int) -> str:
    return f"sign-flip p = {row[f'{name}_p_sign_flip']:.4f} (≥ {least_exact_p(n):.4g} with {n} seeds)"


def _speedup_claim(r: pd.Series) -> dict[str, object]:
    """Symmetric init speeds up training: Table 1's t-test of the signed speed-up, sized against the
    authors' speed-up (the claim rule on their runs) at this horizon."""
    group, n, name = (
        (r["dataset"], r["layers"], r["characters"]),
        int(r["seed_pairs"]),
        f"speedup_{CLAIM_RULE}",
    )
    claim = f"{r['init']} init speeds up training (encoders, Table 1)"
    measured = f"speed-up ({CLAIM_RULE}) {r[name]:.1f} % over {n} seed pair(s)"
    if n < 2:
        return _row(group, claim, measured, "one seed pair: no test", "not tested")
    measured += f" [{r[f'{name}_low']:.1f}, {r[f'{name}_high']:.1f}]"
    test = f"t-test of the signed speed-up, p = {r['signed_p_t']:.3f} (alpha {ALPHA:g}); {_exact(r, 'signed', n)}"
    verdict = _sized(r["verdict"].startswith(FASTER), r, name, CLAIM_RULE, " %")
    if not verdict:
        excluded = f" (effects ≥ {r['mde']:.0f} % excluded at 80% power)" if r["mde"] == r["mde"] else ""
        verdict = "disagrees" if r["verdict"].startswith(SLOWER) else f"not shown{excluded}"
    return _row(group, claim, measured, test, verdict)


def _loss_claim(r: pd.Series) -> dict[str, object]:
    """Symmetric init ends at a lower loss: the t-test of the loss gap at the horizon over seed pairs,
    sized against the authors' gap at this horizon."""
    group, n = (r["dataset"], r["layers"], r["characters"]), int(r["seed_pairs"])
    claim = f"{r['init']} init ends at a lower loss (encoders, Table 1)"
    measured = f"loss gap {r['loss_gap']:+.3f} nats over {n} seed pair(s)"
    if n < 2:
        return _row(group, claim, measured, "one seed pair: no test", "not tested")
    measured += f" [{r['loss_gap_low']:+.3f}, {r['loss_gap_high']:+.3f}]"
    p = r["loss_gap_p_t"]
    test = f"t-test of the loss gap, p = {p:.3f} (alpha {ALPHA:g}); {_exact(r, 'loss_gap', n)}"
    found = p < ALPHA
    verdict = _sized(found and r["loss_gap"] < 0, r, "loss_gap", "gap", " nats")
    return _row(group, claim, measured, test, verdict or ("disagrees" if found else "not shown"))


def _table_rows(table: pd.DataFrame) -> list[dict[str, object]]:
    """Table 1's rows of a symmetric init against random (unregularised encoders): the speed-up claim and
    the lower-final-loss claim."""
    compared = table[
        table["init"].isin(SYMMETRIC)
        & (table["reference"] == REFERENCE)
        & (table["reg_weight"] == 0)
        & (table["objective"] == "encoder")
    ]
    return [claim(r) for _, r in compared.iterrows() for claim in (_speedup_claim, _loss_claim)]
