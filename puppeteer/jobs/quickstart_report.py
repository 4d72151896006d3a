"""The quickstart's comparisons and report: the trained router (one seed or several) against the best
rule and the best single agent, on the same held-out items.

Rows are plain dicts (policy, accuracy, ci, calls, tokens, model_s, wall_s, cache hits / misses), one
per evaluated policy; ``grades`` maps each row's policy to its per-item grades (task id -> bool) for
the paired tests.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from statistics import fmean
from typing import Any

from puppeteer.evaluation.stats import McNemar, mcnemar_exact

TRAINED = "puppeteer (trained)"
ONE_CALL = "puppeteer (one call: the first stage)"
UNITS = {"model_s": "model s", "tokens": "tokens"}  # the short name of each cost a report compares on
RULE_PREFIXES = ("best-rule", "rules:")
SINGLE_PREFIXES = ("single:", "best-single")

Row = Mapping[str, Any]
Grades = Mapping[str, Mapping[str, bool]]  # policy -> task id -> correct


def cost_axis(rows: Sequence[Row]) -> tuple[str, str]:
    """The cost the rows are compared on: single-stream model seconds where every row has them (pools
    that declare their models' speeds), else tokens. Returns (row key, axis label)."""
    if rows and all(r.get("model_s") is not None for r in rows):
        return "model_s", "single-stream model seconds per item (declared speeds)"
    return "tokens", "tokens per item"


def best_single(rows: Sequence[Row]) -> Row | None:
    """The best single agent among the rows (``single:A`` and the fitted ``best-single``): the highest
    accuracy, the cheaper one on a tie."""
    key, _ = cost_axis(rows)
    singles = [r for r in rows if r["policy"].startswith(SINGLE_PREFIXES)]
    return max(singles, key=lambda r: (r["accuracy"], -r[key])) if singles else None


def best_rule(rows: Sequence[Row]) -> Row | None:
    """The first rule row (``best-rule``, chosen on the training items, or a fixed ``rules:`` spec)."""
    return next((r for r in rows if r["policy"].startswith(RULE_PREFIXES)), None)


def trained_rows(rows: Sequence[Row]) -> list[Row]:
    """The trained router's rows: one per seed (``puppeteer (trained)``, or ``... seed N`` for several)."""
    return [r for r in rows if r["policy"] == TRAINED or r["policy"].startswith(f"{TRAINED} seed ")]


def pooled_mcnemar(mine: Sequence[Mapping[str, bool]], theirs: Mapping[str, bool]) -> McNemar:
    """Exact McNemar test of each of ``mine`` (one seed's grades) against one reference on the items
    both graded, pooled over the seeds: (seed, item) pairs."""
    a: list[bool] = []
    b: list[bool] = []
    for grades in mine:
        for task, ok in grades.items():
            if task in theirs:
                a.append(theirs[task])
                b.append(ok)
    return mcnemar_exact(a, b)


@dataclass(frozen=True)
class Versus:
    """The trained router (its seeds) against one reference policy."""

    label: str  # "the best rule" / "the best single agent"
    reference: Row
    mean_points: float  # mean over seeds of (trained - reference) accuracy, in points
    worst_points: float  # the worst seed's
    cost_ratio: float | None  # mean trained cost / the reference's
    test: McNemar | None  # pooled over seeds; None without per-item grades

    def sentence(self, key: str, n_seeds: int) -> str:
        ref, unit = self.reference, UNITS[key]
        ratio = f"{self.cost_ratio:.2f}x its {unit}" if self.cost_ratio is not None else f"n/a {unit}"
        points = (
            f"{self.mean_points:+.0f} points"
            if n_seeds == 1
            else f"{self.mean_points:+.1f} points on average, {self.worst_points:+.1f} for the worst seed,"
        )
        p = ""
        if self.test is not None:
            pairs = "paired by item" if n_seeds == 1 else f"{self.test.n} (seed, item) pairs"
            p = f" (exact McNemar p = {self.test.p_value:.2g}, {pairs})"
        return (
            f"{self.label}, {ref['policy']}, {ref['accuracy']:.2f} at {ref[key]:.1f}: {points} at {ratio}{p}"
        )


def versus(label: str, mine: Sequence[Row], ref: Row, key: str, grades: Grades | None) -> Versus:
    deltas = [100 * (r["accuracy"] - ref["accuracy"]) for r in mine]
    cost = fmean(float(r[key]) for r in mine)
    test = None
    if grades is not None and ref["policy"] in grades and all(r["policy"] in grades for r in mine):
        test = pooled_mcnemar([grades[r["policy"]] for r in mine], grades[ref["policy"]])
    return Versus(
        label=label,
        reference=ref,
        mean_points=fmean(deltas),
        worst_points=min(deltas),
        cost_ratio=cost / float(ref[key]) if ref[key] else None,
        test=test,
    )


def headline(rows: Sequence[Row], grades: Grades | None = None) -> str | None:
    """Sentences: the trained router (the mean and the worst of its seeds) against the best rule and the
    best single agent among the rows, in accuracy points and cost ratio, with the exact McNemar p when
    per-item grades are given. None without a trained row or a reference."""
    key, _ = cost_axis(rows)
    mine = trained_rows(rows)
    refs = [("the best rule", best_rule(rows)), ("the best single agent", best_single(rows))]
    found = [versus(label, mine, ref, key, grades) for label, ref in refs if ref is not None]
    if not mine or not found:
        return None
    unit = UNITS[key]
    cost = fmean(float(r[key]) for r in mine)
    if len(mine) == 1:
        lead = f"The trained router scores {mine[0]['accuracy']:.2f} at {cost:.1f} {unit} per item"
    else:
        accs = [r["accuracy"] for r in mine]
        lead = (
            f"Over {len(mine)} seeds the trained router scores {fmean(accs):.3f} on average (worst seed "
            f"{min(accs):.3f}) at {cost:.1f} {unit} per item"
        )
    return lead + "; " + "; ".join(v.sentence(key, len(mine)) for v in found) + "."
