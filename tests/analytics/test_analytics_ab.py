from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pandas as pd
import pytest
from analytics_fixtures import trajectory, write_eval_run

from puppeteer.agents.pool import Pool, load_pool
from puppeteer.analytics import load
from puppeteer.analytics.ab import compare_runs, markdown, run_ab, shown_metrics
from puppeteer.cli import main


def test_ab_on_the_simulator_pairs_items_and_writes_reports(tmp_path: Path) -> None:
    out = tmp_path / "ab"
    r = run_ab("single:gemma3-27b-cot", "oracle", "sim-paper", "arith", out, n=60)
    a, b = load(out / "A_single_gemma3-27b-cot"), load(out / "B_oracle")
    assert list(a["task_id"]) == list(b["task_id"]) and r.n_pairs == 60
    mc = r.accuracy
    assert mc.both + mc.only_a + mc.only_b + mc.neither == 60
    assert r.a.accuracy == pytest.approx((mc.both + mc.only_a) / 60)
    assert r.b.accuracy == pytest.approx((mc.both + mc.only_b) / 60)
    assert r.metrics["calls"].diff == pytest.approx(b["calls"].mean() - a["calls"].mean())
    assert r.metrics["tokens"].ci_low <= r.metrics["tokens"].diff <= r.metrics["tokens"].ci_high
    assert r.a.backend == "sim"
    saved = json.loads((out / "ab.json").read_text())
    assert saved["accuracy"]["only_b"] == mc.only_b and saved["n_pairs"] == 60
    md = (out / "ab.md").read_text()
    assert "exact McNemar" in md and "backend: sim" in md
    assert (out / "ab.png").stat().st_size > 5000
    # the same comparison from the two finished run directories gives the same numbers
    again = compare_runs(out / "A_single_gemma3-27b-cot", out / "B_oracle")
    assert again.accuracy == r.accuracy and again.metrics == r.metrics


def test_ab_pairs_by_task_id_and_drops_unpaired_items(tmp_path: Path) -> None:
    ra = write_eval_run(
        tmp_path / "a",
        [trajectory("x", ["A"], True), trajectory("y", ["A"], False), trajectory("z", ["A"], True)],
    )
    rb = write_eval_run(tmp_path / "b", [trajectory("y", ["B", "B"], True), trajectory("x", ["B"], True)])
    r = compare_runs(ra, rb)
    assert r.n_pairs == 2 and (r.accuracy.both, r.accuracy.only_b) == (1, 1)
    assert r.metrics["calls"].diff == pytest.approx(0.5)


def test_ab_command(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "cli"
    assert (
        main(
            [
                "ab",
                "single:gpt5-cot",
                "vote:3",
                "--pool",
                "sim-paper",
                "--suite",
                "arith",
                "--n",
                "20",
                "--out",
                str(out),
            ]
        )
        == 0
    )
    assert "McNemar" in capsys.readouterr().out
    assert (out / "ab.json").exists()
    # run again into the same folder: a finished arm is refused, with the flag that runs it again
    again = ["ab", "single:gpt5-cot", "vote:3", "--pool", "sim-paper", "--suite", "arith", "--n", "20"]
    assert main([*again, "--out", str(out)]) != 0
    assert "--overwrite" in capsys.readouterr().out
    assert main([*again, "--n", "10", "--out", str(out), "--overwrite"]) == 0
    assert json.loads((out / "ab.json").read_text())["n_pairs"] == 10  # the arms ran again, on 10 items


# ----------------------------------------------------------------------------- three or more arms


def test_arms_compare_each_with_the_first_on_the_items_all_have(tmp_path: Path) -> None:
    """Hand-made runs: A right on x, y; B right on x, y, z (one more call on y); C right on x only and
    missing item w, which the summary therefore leaves out for every arm."""
    from puppeteer.analytics.arms import compare_arms, write_arms_report

    items = ("w", "x", "y", "z")
    ra = write_eval_run(tmp_path / "a", [trajectory(t, ["A"], t in "xy") for t in items], policy="pa")
    b_runs = [trajectory(t, ["B", "B"] if t == "y" else ["B"], t != "w") for t in items]
    rb = write_eval_run(tmp_path / "b", b_runs, policy="pb")
    rc = write_eval_run(tmp_path / "c", [trajectory(t, ["C"], t == "x") for t in "xyz"], policy="pc")
    r = compare_arms([ra, rb, rc])
    assert r.n_common == 3 and [a.arm.label for a in r.arms] == ["A", "B", "C"]
    assert [a.policy for a in r.arms] == ["pa", "pb", "pc"]
    assert [round(a.arm.accuracy, 3) for a in r.arms] == [0.667, 1.0, 0.333]  # on x, y, z
    assert r.arms[1].calls == pytest.approx(4 / 3)
    # the pairs use every item the two share: A-B all four (B only on z), A-C three (A only on y)
    ab, ac = r.pairs
    assert ab.n_pairs == 4 and (ab.accuracy.only_a, ab.accuracy.only_b) == (0, 1)
    assert ac.n_pairs == 3 and (ac.accuracy.only_a, ac.accuracy.only_b) == (1, 0)
    assert r.bonferroni == pytest.approx(0.025)
    md_path, js_path, png_path = write_arms_report(r, tmp_path / "out")
    md = md_path.read_text()
    assert "Bonferroni threshold p < 0.025" in md and "### A vs C" in md and "`pb`" in md
    saved = json.loads(js_path.read_text())
    assert saved["n_common"] == 3 and saved["pairs"][1]["accuracy"]["only_a"] == 1
    assert png_path.stat().st_size > 5000 and (tmp_path / "out" / "A_vs_B" / "ab.md").exists()


def test_arms_need_two_and_share_an_item(tmp_path: Path) -> None:
    from puppeteer.analytics.arms import compare_arms

    ra = write_eval_run(tmp_path / "a", [trajectory("x", ["A"], True)])
    rb = write_eval_run(tmp_path / "b", [trajectory("y", ["B"], True)])
    with pytest.raises(ValueError, match="two arms"):
        compare_arms([ra])
    with pytest.raises(ValueError, match="share no items"):
        compare_arms([ra, rb])


def test_ab_command_with_three_arms(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "three"
    args = ["ab", "single:gpt5-cot", "vote:3", "oracle", "--pool", "sim-paper", "--suite", "arith"]
    assert main([*args, "--n", "20", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "Bonferroni" in printed and "A vs C" in printed
    saved = json.loads((out / "arms.json").read_text())
    assert [a["spec"] for a in saved["arms"]] == ["single:gpt5-cot", "vote:3", "oracle"]
    assert all(a["n"] == 20 for a in saved["arms"])


def test_overwrite_leaves_only_this_ab_in_its_folder(tmp_path: Path) -> None:
    """An --overwrite run into an earlier A/B's folder removes the earlier arms, pairs and reports it
    does not write again, and keeps what is not an A/B's (a user's own file, a folder of another name)."""
    out = tmp_path / "ab"
    three = ["ab", "single:gpt5-cot", "vote:3", "oracle", "--pool", "sim-paper", "--suite", "arith"]
    assert main([*three, "--n", "10", "--out", str(out)]) == 0
    earlier = {p.name for p in out.iterdir()}
    assert {"C_oracle", "A_vs_B", "A_vs_C", "arms.json"} <= earlier
    (out / "notes.txt").write_text("mine")
    (out / "Z_kept").mkdir()  # not a run folder: stays
    two = ["ab", "single:gpt5-cot", "oracle", "--pool", "sim-paper", "--suite", "arith"]
    assert main([*two, "--n", "10", "--out", str(out), "--overwrite"]) == 0
    now = {p.name for p in out.iterdir()}
    assert {"A_single_gpt5-cot", "B_oracle", "ab.json", "ab.md", "notes.txt", "Z_kept"} <= now
    assert not now & {"B_vote_3", "C_oracle", "A_vs_B", "A_vs_C", "arms.json", "arms.md", "arms.png"}
    assert json.loads((out / "ab.json").read_text())["b"]["spec"] == "oracle"


def test_arms_plot_of_local_models_without_usd(tmp_path: Path) -> None:
    """Local models cost no USD: the plot has the tokens panel only instead of a flat USD panel."""
    from dataclasses import replace

    from puppeteer.analytics.arms import arms_plot, compare_arms

    ra = write_eval_run(tmp_path / "a", [trajectory(t, ["A"], t == "x") for t in "xy"])
    rb = write_eval_run(tmp_path / "b", [trajectory(t, ["B"], True, tokens=50) for t in "xy"])
    r = compare_arms([ra, rb])
    free = replace(r, arms=tuple(replace(a, usd=0.0) for a in r.arms))
    wide, narrow = arms_plot(r, tmp_path / "usd.png"), arms_plot(free, tmp_path / "local.png")
    from PIL import Image

    assert Image.open(narrow).size[0] < Image.open(wide).size[0]  # one panel instead of two


# ----------------------------------------------------------------------------- model seconds


def _timed_pool() -> Pool:
    """Agents A and B on two models with declared single-stream speeds (prefill, decode tokens/s):
    A (100, 10), B (50, 5). The fixture's calls have 100 prompt and 50 completion tokens, so one call
    of A costs 100/100 + 50/10 = 6 s and one of B 100/50 + 50/5 = 12 s."""
    base = load_pool("sim-paper")
    agents = []
    for agent, name, (prefill, decode) in zip(base.agents, "AB", ((100.0, 10.0), (50.0, 5.0)), strict=False):
        model = dataclasses.replace(agent.model, name=f"m{name}", prefill_tps=prefill, decode_tps=decode)
        agents.append(dataclasses.replace(agent, name=name, model=model))
    return dataclasses.replace(base, name="timed", agents=tuple(agents))


def test_ab_prices_model_seconds_at_the_pools_declared_speeds(tmp_path: Path) -> None:
    ra = write_eval_run(tmp_path / "a", [trajectory(t, ["A"], t == "x") for t in "xy"])
    rb = write_eval_run(tmp_path / "b", [trajectory("x", ["B"], True), trajectory("y", ["B", "B"], True)])
    r = compare_runs(ra, rb, speeds=_timed_pool())
    d = r.metrics["model_s"]
    assert (d.mean_a, d.mean_b, d.diff) == pytest.approx((6.0, 18.0, 12.0))  # B: (12 + 24) / 2
    assert d.ci_low <= d.diff <= d.ci_high
    assert "| model s per item (single-stream) | 6 | 18 | +12 |" in markdown(r)
    # without declared speeds, or with an agent the pool does not know, nothing is priced
    assert "model_s" not in compare_runs(ra, rb).metrics
    rc = write_eval_run(tmp_path / "c", [trajectory(t, ["C"], True) for t in "xy"])
    assert "model_s" not in compare_runs(ra, rc, speeds=_timed_pool()).metrics


def test_ab_leaves_out_usd_where_neither_arm_spent_any(tmp_path: Path) -> None:
    a = pd.DataFrame({"cost_usd": [0.0, 0.0], "tokens": [1, 2], "calls": [1, 1], "reward": [0, 1]})
    b = a.assign(cost_usd=[0.0, None])
    assert shown_metrics(a, b) == ["tokens", "calls", "reward"]
    assert shown_metrics(a, b.assign(cost_usd=[0.0, 0.01]))[0] == "cost_usd"
    assert "model_s" in shown_metrics(a.assign(model_s=1.0), b.assign(model_s=2.0))
    assert "model_s" not in shown_metrics(a.assign(model_s=1.0), b)  # only where both arms were priced


def test_ab_compares_rewards_only_between_arms_of_one_mode(tmp_path: Path) -> None:
    """A workflow arm's reward (0 / 0.5 / 1) and a step arm's (quality - lambda * cost) are not one scale."""
    ra = write_eval_run(tmp_path / "a", [trajectory(t, ["A"], True, mode="workflow") for t in "xy"])
    rb = write_eval_run(tmp_path / "b", [trajectory(t, ["B"], True) for t in "xy"])
    rc = write_eval_run(tmp_path / "c", [trajectory(t, ["B"], False) for t in "xy"])
    mixed, same = compare_runs(ra, rb), compare_runs(rb, rc)
    assert "reward" not in mixed.metrics and "reward |" not in markdown(mixed)
    assert "reward" in same.metrics and "calls" in mixed.metrics


def test_ab_compares_rewards_only_between_arms_paid_at_one_lambda(tmp_path: Path) -> None:
    """A single agent evaluated at lambda 0.1 and a per-kind router at lambda 1 (both workflow mode) once
    showed a reward "difference" of -0.155 that was only the two prices (experiments/local-mix/README.md's
    A/B)."""
    cheap = [trajectory(t, ["A"], True, mode="workflow") for t in "xy"]
    ra = write_eval_run(tmp_path / "a", cheap)
    rb = write_eval_run(tmp_path / "b", cheap, extra={"lam": 1.0})
    rc = write_eval_run(tmp_path / "c", cheap, extra={"lam": 0.1})
    assert "reward" not in compare_runs(ra, rb).metrics
    assert "reward" in compare_runs(ra, rc).metrics


def test_arms_rank_on_model_seconds_when_every_arm_is_priced(tmp_path: Path) -> None:
    """A: 6 s, right on x; B: 12 s, right on x and y; so both are on the model-seconds front."""
    from puppeteer.analytics.arms import arms_markdown, compare_arms

    ra = write_eval_run(tmp_path / "a", [trajectory(t, ["A"], t == "x") for t in "xy"], policy="cheap")
    rb = write_eval_run(tmp_path / "b", [trajectory(t, ["B"], True) for t in "xy"], policy="dear")
    r = compare_arms([ra, rb], speeds=_timed_pool())
    assert [a.model_s for a in r.arms] == pytest.approx([6.0, 12.0])
    assert [c for c, _ in r.costs] == ["model_s", "tokens", "usd"]  # the fixture's calls cost USD
    md = arms_markdown(r)
    assert "Pareto (model s)" in md and "| `cheap` | 0.500 [" in md
    assert md.count(" | * |") == 2
    unpriced = compare_arms([ra, rb])
    assert unpriced.arms[0].model_s is None and [c for c, _ in unpriced.costs] == ["tokens", "usd"]
