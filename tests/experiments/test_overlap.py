"""Item-by-item comparison of evaluation runs (experiments/baselines-local/overlap.py) and the baselines
table that reports it (experiments/baselines-local/baselines_table.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from puppeteer.evaluation.evaluate import evaluate_policy
from tests.experiment_modules import experiment_module

baselines_table = experiment_module("baselines-local", "baselines_table")
_overlap = experiment_module("baselines-local", "overlap")
Outcomes, compare, coverage = _overlap.Outcomes, _overlap.compare, _overlap.coverage
read_outcomes, read_revisions = _overlap.read_outcomes, _overlap.read_revisions


def _write(path: Path, correct: dict[str, bool]) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    with (path / "trajectories.jsonl").open("w") as f:
        for task_id, ok in correct.items():
            f.write(json.dumps({"task_id": task_id, "correct": ok, "steps": []}) + "\n")
    return path


def test_compare_counts_gains_and_losses(tmp_path: Path) -> None:
    ref = read_outcomes(_write(tmp_path / "ref", {"a": True, "b": True, "c": False, "d": False}))
    run = read_outcomes(_write(tmp_path / "run", {"a": True, "b": False, "c": True, "d": True}))
    c = compare(run, ref)
    assert (c.gained, c.lost, c.both, c.n, c.net) == (2, 1, 1, 4, 1)
    back = compare(ref, run)
    assert (back.gained, back.lost, back.net) == (1, 2, -1)


def test_coverage_is_the_union_and_names_the_best(tmp_path: Path) -> None:
    runs = {
        "x": Outcomes(frozenset("abcd"), frozenset("a")),
        "y": Outcomes(frozenset("abcd"), frozenset("bc")),
        "z": Outcomes(frozenset("abcd"), frozenset("cb")),
    }
    cov = coverage(runs)
    assert (cov.any, cov.best, cov.best_solved, cov.n) == (3, "y", 2, 4)  # y and z tie: first listed


def test_runs_on_different_items_are_refused(tmp_path: Path) -> None:
    a = Outcomes(frozenset("ab"), frozenset("a"))
    b = Outcomes(frozenset("ac"), frozenset("a"))
    with pytest.raises(ValueError, match="different items"):
        compare(a, b)
    with pytest.raises(ValueError, match="different items"):
        coverage({"a": a, "b": b})
    with pytest.raises(ValueError, match="subset"):
        Outcomes(frozenset("a"), frozenset("ab"))


def test_duplicate_items_in_a_file_are_refused(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    path.write_text('{"task_id": "a", "correct": true}\n{"task_id": "a", "correct": false}\n')
    with pytest.raises(ValueError, match="twice"):
        read_outcomes(path)


def test_reads_what_evaluate_policy_writes(tmp_path: Path) -> None:
    result = evaluate_policy(
        "single:gpt5-cot", "sim-paper", "arith", n=20, out_dir=tmp_path / "run", progress=False
    )
    outcomes = read_outcomes(tmp_path / "run")
    assert len(outcomes.items) == 20
    assert len(outcomes.solved) == result.correct
    assert outcomes.accuracy == pytest.approx(result.accuracy)


def test_baselines_table_reports_item_overlap(tmp_path: Path) -> None:
    module = baselines_table
    out = tmp_path / "table.md"
    runs = tmp_path / "runs"
    specs = ["single:gpt5-cot", "single:gemma3-27b-cot", "vote:3", "chain:gemma3-27b-cot,gpt5-cot"]
    assert (
        module.main(
            [
                "--pool",
                "sim-paper",
                "--suites",
                "mix-math-mmlu",
                "--n",
                "40",
                "--quiet",
                "--no-cache",
                "--specs",
                *specs,
                "--runs-dir",
                str(runs),
                "--out",
                str(out),
            ]
        )
        == 0
    )
    text = out.read_text()
    singles = {
        name: read_outcomes(runs / "sim-paper" / "mix-math-mmlu" / f"single_{name}")
        for name in ("gpt5-cot", "gemma3-27b-cot")
    }
    vote = read_outcomes(runs / "sim-paper" / "mix-math-mmlu" / "vote_3")
    union = len(singles["gpt5-cot"].solved | singles["gemma3-27b-cot"].solved)
    best = max(singles, key=lambda k: len(singles[k].solved))
    c = compare(vote, singles[best])
    assert f"solves **{union} of 40** items" in text
    assert f"| `vote:3` | {len(vote.solved)} | +{c.gained} | -{c.lost} | - |" in text
    chain_dir = runs / "sim-paper" / "mix-math-mmlu" / "chain_gemma3-27b-cot_gpt5-cot"
    rev = read_revisions(chain_dir)
    assert rev.episodes == 40
    assert f"| {rev.same_answer} of 40 ({rev.verbatim}) |" in text
    assert "Partial" not in text
    assert "![accuracy against model time](img/baselines-sim-paper.png)" in text
    assert (tmp_path / "img" / "baselines-sim-paper.png").stat().st_size > 10_000


def test_revisions_count_kept_answers_and_verbatim_copies(tmp_path: Path) -> None:
    def step(answer: str, text: str) -> dict[str, object]:
        return {"answer": answer, "completion": {"text": text}}

    episodes = [
        [step("1", "x. Answer: 1"), step("1", "x. Answer: 1 ")],  # verbatim (whitespace aside)
        [step("1", "x. Answer: 1"), step("1", "checked. Answer: 1")],  # same answer, new text
        [step("1", "x. Answer: 1"), step("2", "no. Answer: 2")],  # changed
        [step("3", "only one step")],  # not counted
    ]
    path = tmp_path / "trajectories.jsonl"
    path.write_text(
        "".join(
            json.dumps({"task_id": str(i), "correct": False, "steps": s}) + "\n"
            for i, s in enumerate(episodes)
        )
    )
    rev = read_revisions(path)
    assert (rev.episodes, rev.same_answer, rev.verbatim, rev.changed) == (3, 2, 1, 1)


def test_pareto_front_keeps_only_undominated_policies() -> None:
    from puppeteer.analytics.plots import CostPoint, pareto_front

    pts = [
        CostPoint("cheap", 1.0, 0.2, 0.1, 0.3),
        CostPoint("dominated", 5.0, 0.15, 0.1, 0.2),
        CostPoint("mid", 3.0, 0.4, 0.3, 0.5),
        CostPoint("tie-dearer", 4.0, 0.4, 0.3, 0.5),
        CostPoint("best", 30.0, 0.5, 0.4, 0.6),
    ]
    assert [p.label for p in pareto_front(pts)] == ["cheap", "mid", "best"]


def test_a_point_that_ties_with_another_is_drawn_beside_it_and_says_so(tmp_path: Path) -> None:
    """Issue 33: the quickstart's trained router hid under the agent it tied with."""
    from matplotlib import image

    from puppeteer.analytics.plots import DODGE, CostPoint, accuracy_vs_cost, dodged

    pts = [
        CostPoint("single:a", 13.2, 0.633, 0.5, 0.75),
        CostPoint("puppeteer (trained)", 13.25, 0.633, 0.5, 0.75),  # the same point within 1% of cost
        CostPoint("random", 14.0, 0.367, 0.25, 0.5),
        CostPoint("vote", 13.2, 0.633, 0.5, 0.75),
    ]
    placed = dodged(pts, log=True)
    assert placed[0] == (13.2, "single:a") and placed[2] == (14.0, "random")
    assert placed[1][0] == pytest.approx(13.25 * (1 + DODGE))
    assert placed[1][1] == "puppeteer (trained) (same point as single:a; drawn right of it)"
    assert placed[3][0] == pytest.approx(13.2 * (1 + DODGE) ** 2)  # two earlier twins
    linear = dodged([CostPoint("x", 0.0, 0.5, 0.4, 0.6), CostPoint("y", 0.0, 0.5, 0.4, 0.6)], log=False)
    assert linear[1][0] == pytest.approx(DODGE)  # zero cost: a linear axis, shifted by a share of it
    png = accuracy_vs_cost({"held-out": pts}, tmp_path / "p.png", "t [backend: sim]", "model s")
    assert image.imread(png).shape[0] > 100


def test_baselines_table_rewrite_keeps_hand_written_notes(tmp_path: Path) -> None:
    module = baselines_table
    out = tmp_path / "table.md"
    args = [
        "--pool",
        "sim-paper",
        "--suites",
        "arith",
        "--n",
        "5",
        "--quiet",
        "--no-cache",
        "--no-plot",
        "--specs",
        "single:gpt5-cot",
        "--runs-dir",
        str(tmp_path / "runs"),
        "--out",
        str(out),
    ]
    assert module.main(args) == 0
    assert out.read_text().rstrip().endswith(module.NOTES_MARKER)
    out.write_text(out.read_text() + "\n## Findings\n\nwritten by hand\n")
    assert module.main(args) == 0
    text = out.read_text()
    assert text.count(module.NOTES_MARKER) == 1
    assert text.endswith(module.NOTES_MARKER + "\n\n## Findings\n\nwritten by hand\n")
    assert "`single:gpt5-cot`" in text
