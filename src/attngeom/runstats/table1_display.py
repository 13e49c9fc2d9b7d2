"""Table 1 as text: the columns as the paper lays them out, with intervals, for Markdown and LaTeX (a block
per depth, as the paper prints it), the caption, and the CSV with every number (``table1.summarise``)."""

from __future__ import annotations

import os

import pandas as pd

from ..tables import formats
from ..training.inits import EFFECTS
from .authors import DATASETS
from .intervals import Interval
from .significance import ALPHA, least_exact_p
from .speedup import CLAIM_RULE, GAP_UPDATES

EFFECT_LEGEND = "; ".join(
    f"{candidate} vs {reference} = {effect}" for (candidate, reference), effect in EFFECTS.items()
)
"""What each comparison measures, as the caption says it (``training.inits``)."""
PAPER_CAPTION = (
    "As the paper prints it: per depth, kind of text and init, the final loss (smoothed: trailing mean over "
    "2% of the log) and, for an init compared with random over the same seeds, how much sooner it reaches "
    f"the random run's final loss ('{CLAIM_RULE}' rule, percent of the updates T), the loss gap (candidate "
    f"minus random, mean over the last {GAP_UPDATES:,} updates up to T) and the p-values of the two-sided "
    "t-test and of the exact sign-flip test (which cannot go below 2/2ⁿ with n seeds) of the signed "
    "speed-up. Seeds: the init's runs (its final loss is over them); seed pairs: the seeds both it and "
    "random ran (the speed-up, the gap and the tests are over them). [low, high]: 95% Student-t interval "
    "of the mean over seed pairs. Authors: their own runs "
    "of this init (one seed, config/reference/authors-logs; BERT-mini or -base on Jigsaw beside word "
    "pieces, Wikipedia and RedPajama beside characters) cut at T and at the end of their schedule "
    "(200,000 updates), by the same rule; the paper's printed speed-up is their notebook's formula at "
    "200,000. Every comparison, the null, censoring, the Wilcoxon test and the paper's formula: the "
    "supplementary blocks below."
)
CAPTION = (
    "Final loss (smoothed: trailing mean over 2% of the log) per init, and per comparison of two inits "
    "(the candidate 'init' vs the reference 'vs', the same seed: 'effect' says what their difference "
    f"measures: {EFFECT_LEGEND}) the speed-up "
    "of the candidate over the reference, per depth, dataset and objective, over the seed pairs (the "
    "seeds both arms ran; 'seeds' counts the candidate's runs, over which its final loss is). "
    "'paper' = the paper's formula, (T − t_candidate) / T with t_candidate the first step at which the "
    "candidate's smoothed loss reaches the reference run's final loss (it also gives a run against itself a "
    "positive value on a noisy plateau); 'robust' = (t_reference − t_candidate) / T with t the first step "
    "after which each run stays at or below that loss (0 for a run against itself). A run that never "
    "reaches it is censored ('> T'): its speed-up is at most the value shown; 'censored' counts such pairs. "
    f"Tests, two-sided, alpha {ALPHA:g}, of the signed speed-up (robust speed-up of the candidate over the "
    "reference minus that of the reference over the candidate, each where positive; 0 in expectation when "
    "init makes no difference): the one-sample t-test over seeds (p (t); MDE the smallest mean signed "
    "speed-up it detects with 80% power given the seeds' spread; the 'verdict' is its), and two tests "
    "that do not rest on normality, the exact paired sign-flip test (p (sign-flip); 'exact verdict') and "
    "the exact Wilcoxon signed-rank test (p (Wilcoxon)). An exact test with n seeds cannot give p below "
    f"2/2ⁿ: {least_exact_p(5):.4g} with 5 seeds, so at alpha {ALPHA:g} it needs 6 seeds or more to "
    "find anything; with fewer its verdict says so. Null = the signed speed-up of random-vs-random pairs "
    "of different seeds (disjoint pairs; 3 seeds give one), the spread seed noise alone makes. "
    f"Loss gap: candidate minus reference loss, mean over the last {GAP_UPDATES:,} updates up to T. "
    "Leaves plateau: the step at which each run's smoothed loss first reaches one fixed loss, the same for "
    "every run of its comparison group (shown after 'at'; a quarter of the way from the runs' mean plateau "
    "loss to the highest final loss), earliest–latest over seeds. "
    "Authors at T: the authors' own runs (one seed, config/reference/authors-logs) cut at this row's "
    "horizon T: their notebook's formula / ours (robust), and their loss gap; beside 4-layer word-piece "
    "encoders their BERT-mini on Jigsaw, beside character-spaced ones Wikipedia and RedPajama. "
    "± and [low, high]: 95% Student-t interval over seeds; with one seed no interval and no test."
)


def _objective(table: pd.DataFrame) -> pd.Series:
    """ "encoder", or "decoder (causal loss)" / "decoder (masked loss)": the two decoder losses are two rows."""
    losses = table["decoder_loss"].fillna("") if "decoder_loss" in table else pd.Series("", index=table.index)
    return table["objective"] + losses.map(lambda loss: f" ({loss} loss)" if loss else "")


def _numbers(table: pd.DataFrame, column: str, text: str) -> list[str]:
    return ["" if pd.isna(v) else text.format(v) for v in table[column]]


def _cells(table: pd.DataFrame, name: str, count: str, digits: int, style: str) -> list[str]:
    """``name`` with its interval, over ``count`` seeds or pairs, in the ``Interval`` ``style``."""
    found = (
        Interval(row[name], row[f"{name}_low"], row[f"{name}_high"], int(row[count]))
        for _, row in table.iterrows()
    )
    return [getattr(i, style)(digits) if i.n else "" for i in found]


def _pairs(table: pd.DataFrame) -> list[str]:
    """How many seed pairs a comparison rests on (blank for a row that compares nothing): fewer than the
    candidate's seeds where the reference arm ran fewer, which its interval and tests then reflect."""
    return [f"{int(n)}" if n else "" for n in table["seed_pairs"]]


def _censoring(table: pd.DataFrame) -> list[str]:
    """ "k of n > T" where k of the n candidate runs never reach the reference run's final loss."""
    return [
        f"{int(row['censored'])} of {int(row['seed_pairs'])} > T" if row["seed_pairs"] else ""
        for _, row in table.iterrows()
    ]


def _plateau(table: pd.DataFrame) -> list[str]:
    """ "3651–3724 at 5.89" (earliest–latest step at which the seeds reached the group's exit level),
    "k of n: never"."""
    cells = []
    for _, row in table.iterrows():
        left, never = int(row["plateau_left"]), int(row["seeds"] - row["plateau_left"])
        low, high = row["plateau_exit_low"], row["plateau_exit_high"]
        steps = (f"{low:.0f}" if low == high else f"{low:.0f}–{high:.0f}") if left else ""
        at = f"at {row['plateau_level']:.2f}" if pd.notna(row["plateau_level"]) else ""
        never_text = f"{never} of {row['seeds']}: never" if never else ""
        cells.append(" ".join(filter(None, [", ".join(filter(None, [steps, never_text])), at])))
    return cells


def _authors(table: pd.DataFrame) -> list[str]:
    """ "jigsaw 28.9 / 27.6 %, gap −0.56": per counterpart, the notebook's and our rule's speed-up and the
    loss gap of the authors' runs at this row's horizon."""
    cells = []
    for _, row in table.iterrows():
        parts = []
        for dataset in DATASETS:
            notebook = row.get(f"authors_{dataset}_notebook")
            if notebook is not None and pd.notna(notebook):
                ours, gap = row[f"authors_{dataset}_{CLAIM_RULE}"], row[f"authors_{dataset}_gap"]
                parts.append(f"{dataset} {notebook:.1f} / {ours:.1f} %, gap {gap:+.2f}")
        cells.append("; ".join(parts))
    return cells


def table1_display(table: pd.DataFrame) -> pd.DataFrame:
    """Table 1 as the paper lays it out (grouped by depth, then dataset), numbers as text with their
    intervals, for Markdown and LaTeX; the CSV keeps ``table``'s numbers."""
    init = table["init"] + table["reg_weight"].map(lambda w: f" (reg {w:g})" if w else "")
    shown = pd.DataFrame({"depth": table["layers"].map(lambda n: f"{n}-layer"), "dataset": table["dataset"]})
    if table["characters"].any():
        shown["text"] = table["characters"].map({True: "characters", False: "word pieces"})
    shown = shown.assign(
        **{
            "objective": _objective(table),
            "init": init,
            "vs": table["reference"],
            "effect": table["effect"],
            "seeds": table["seeds"],
            "seed pairs": _pairs(table),
            "steps": table["steps"],
            "final loss": _cells(table, "final_loss", "seeds", 3, "plus_minus"),
            "leaves plateau (step at loss)": _plateau(table),
            f"speed-up % ({CLAIM_RULE})": _cells(
                table, f"speedup_{CLAIM_RULE}", "seed_pairs", 1, "bracketed"
            ),
            "censored": _censoring(table),
            "speed-up % (paper's formula)": _cells(table, "speedup_paper", "seed_pairs", 1, "bracketed"),
            "signed speed-up %": _cells(table, "signed", "seed_pairs", 1, "bracketed"),
            "p (t)": _numbers(table, "signed_p_t", "{:.3f}"),
            "p (sign-flip)": _numbers(table, "signed_p_sign_flip", "{:.4f}"),
            "p (Wilcoxon)": _numbers(table, "signed_p_wilcoxon", "{:.4f}"),
            "MDE % (80% power)": _numbers(table, "mde", "{:.1f}"),
            "null (signed) %": [
                c.replace("one seed", "one pair") for c in _cells(table, "null", "null_pairs", 1, "bracketed")
            ],
            "loss gap (nats)": _cells(table, "loss_gap", "seed_pairs", 3, "bracketed"),
            "verdict": table["verdict"],
            "exact verdict": table["verdict_exact"],
        }
    )
    if any(column.startswith("authors_") for column in table):
        shown["authors at T (notebook / robust %, gap)"] = _authors(table)
    if table["corpus_note"].astype(bool).any():
        shown["corpus (not the paper's snapshot)"] = table["corpus_note"]
    published = (("paper_loss", "paper's loss", 3), ("paper_speedup_percent", "paper's speed-up %", 0))
    for column, title, digits in published:
        if column in table:
            shown[title] = table[column].map(lambda v, d=digits: "" if pd.isna(v) else f"{v:.{d}f}")
    return shown


def _authors_cell(row: pd.Series, tag: str) -> str:
    """ "jigsaw 12.1 %, gap −0.03": per counterpart, our rule's speed-up and the loss gap of the authors'
    run of this init (``tag`` "" at this row's horizon, "end_" at 200,000 updates)."""
    parts = []
    for dataset in DATASETS:
        value = row.get(f"authors_{dataset}_{tag}{CLAIM_RULE}")
        if value is not None and pd.notna(value):
            parts.append(f"{dataset} {value:.1f} %, gap {row[f'authors_{dataset}_{tag}gap']:+.2f}")
    return "; ".join(parts)


def paper_table1(table: pd.DataFrame) -> pd.DataFrame:
    """Table 1 as the paper shapes it: one row per depth, kind of text, dataset, objective and init
    (unregularised; each init against random), the final loss, the speed-up over random with its
    interval, the loss gap, the two tests' p, the authors' run of the same init at T and at 200,000, and
    the paper's printed numbers."""
    rows = table[(table["reg_weight"] == 0) & table["reference"].isin(["", "random"])]
    group = ["layers", "characters", "dataset", "objective"]
    rows = (  # runs of one horizon together, the longer first
        rows.assign(horizon=-rows["steps"])
        .sort_values([*group, "horizon"], kind="stable")
        .reset_index(drop=True)
    )
    compared = rows["reference"] == "random"
    speed = _cells(rows, f"speedup_{CLAIM_RULE}", "seed_pairs", 1, "bracketed")
    gap = _cells(rows, "loss_gap", "seed_pairs", 3, "bracketed")
    p_t, p_exact = _numbers(rows, "signed_p_t", "{:.3f}"), _numbers(rows, "signed_p_sign_flip", "{:.3f}")
    shown = pd.DataFrame(
        {
            "depth": rows["layers"].map(lambda n: f"{n}-layer"),
            "text": rows["characters"].map({True: "characters", False: "word pieces"}),
            "dataset": rows["dataset"],
            "objective": _objective(rows),
            "init": rows["init"],
            "seeds": rows["seeds"],
            "seed pairs": _pairs(rows),
            "updates T": rows["steps"].map("{:,}".format),
            "final loss": _cells(rows, "final_loss", "seeds", 3, "plus_minus"),
            "speed-up over random %": [s if c else "" for s, c in zip(speed, compared, strict=True)],
            "loss gap (nats)": [g if c else "" for g, c in zip(gap, compared, strict=True)],
            "p (t; sign-flip)": [f"{a}; {b}" if a else "" for a, b in zip(p_t, p_exact, strict=True)],
            "authors at T": [_authors_cell(r, "") for _, r in rows.iterrows()],
            "authors at 200,000": [_authors_cell(r, "end_") for _, r in rows.iterrows()],
        }
    )
    for column, title, digits in (
        ("paper_speedup_percent", "paper's speed-up %", 0),
        ("paper_loss", "paper's loss", 3),
    ):
        if column in rows:
            shown[title] = rows[column].map(lambda v, d=digits: "" if pd.isna(v) else f"{v:.{d}f}")
    return shown.loc[:, (shown != "").any()]


def write_table1(table: pd.DataFrame, stem: str | os.PathLike, title: str) -> None:
    """Table 1 (``table1.summarise``) as ``stem``.csv (every number), .md, .tex and .html under ``title`` (the
    pipeline's: ``attngeom.artifacts``): first as the paper shapes it (``paper_table1``), then every
    comparison with its tests and the null (``table1_display``, a block per depth), with the caption of
    each."""
    shown = table1_display(table)
    paper = formats.Block(paper_table1(table), "Table 1")
    blocks = [
        formats.Block(rows.drop(columns="depth"), f"Supplementary: every comparison, {depth} models")
        for depth, rows in shown.groupby("depth", sort=False)
    ]
    if blocks:
        blocks[-1] = formats.Block(blocks[-1].table, blocks[-1].heading, (CAPTION,))
    formats.write_table(
        [paper, *blocks], stem, title, csv=table, caption=PAPER_CAPTION, empty="No training run."
    )
