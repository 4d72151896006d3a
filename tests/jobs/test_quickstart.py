"""The main job's code path, end to end on the simulator (the real-model run is timed in
experiments/quickstart/results)."""

from __future__ import annotations

import itertools
import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import yaml
from rich.console import Console

from puppeteer.agents.pool import load_pool
from puppeteer.envs.trajectories import read_trajectories
from puppeteer.evaluation.stats import mcnemar_exact
from puppeteer.jobs.quickstart import QuickstartConfig, run_quickstart
from puppeteer.jobs.quickstart_report import cost_axis, headline, pooled_mcnemar
from puppeteer.tasks import load_suite

REPO = Path(__file__).resolve().parents[2]
SIM = QuickstartConfig(
    pool="sim-paper",
    agents=("gpt5-cot", "gemma3-27b-cot", "qwen3-32b-cot"),
    suite="arith",
    n_train=6,
    n_eval=8,
    episodes=64,
    encoder="hashing",
    cost_model="tokens",  # sim-paper declares no model speeds
    baselines=("single:gemma3-27b-cot", "random"),
    rules=(),  # the fitted rules: their own test below
    # the settings for a few items: lambda per thousand tokens, sampled first steps, the whole question
    lam=0.1,
    batch_episodes=64,
    first_step="sample",
    task_dims=None,
    after_call_episodes=0,  # the one-call router alone; the second stage: its own test below
)


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict]:
    out = tmp_path_factory.mktemp("qs")
    with (out / "log").open("w") as log:
        summary = run_quickstart(SIM, out, cache=out / "responses.sqlite", console=Console(file=log))
    return out, summary


@pytest.fixture(scope="module")
def timed(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict]:
    """The default settings' path (cost model `minutes`, a model-seconds column): sim-paper with
    declared single-stream speeds, as `local-v2` declares them for its llama.cpp models."""
    out = tmp_path_factory.mktemp("qs-timed")
    raw = yaml.safe_load((REPO / "agents" / "sim-paper.yaml").read_text())
    raw["name"] = "sim-paper-timed"
    for i, model in enumerate(raw["models"].values()):
        model.update(prefill_tps=100.0 * (i + 1), decode_tps=10.0 * (i + 1))
    (out / "pool.yaml").write_text(yaml.safe_dump(raw))
    cfg = replace(
        SIM, pool=str(out / "pool.yaml"), cost_model="minutes", baselines=("single:gpt5-cot", "random")
    )
    with (out / "log").open("w") as log:
        summary = run_quickstart(cfg, out, cache=out / "responses.sqlite", console=Console(file=log))
    return out, summary


def test_writes_the_report_plots_results_and_policy(run: tuple[Path, dict]) -> None:
    out, _ = run
    for name in ("report.md", "results.json", "learning_curve.png", "agent_usage.png", "policy"):
        assert (out / name).exists(), name
    saved = json.loads((out / "results.json").read_text())
    assert saved["backend"] == "sim" and saved["episodes"] == 64 and saved["n_eval"] == 8
    policies = [r["policy"] for r in saved["results"]]
    assert policies == ["puppeteer (trained)", "single:gemma3-27b-cot", "random"]
    report = (out / "report.md").read_text()
    assert "Backend **sim**" in report and "llamacpp" not in report
    # training episodes are kept on request only (--trajectories); the evaluations keep theirs
    assert not (out / "train" / "trajectories.jsonl").exists()
    assert len((out / "eval" / "puppeteer" / "trajectories.jsonl").read_text().splitlines()) == 8
    assert "Seed 0: the default, fixed before any run" in report


def test_items_that_failed_with_an_error_are_named_in_the_report(run: tuple[Path, dict]) -> None:
    """An item whose episode raised counts as wrong; the report says how many, per policy."""
    from puppeteer.jobs.quickstart import _report

    out, summary = run
    assert all(r["errors"] == 0 for r in summary["results"])
    assert "failed with an error" not in (out / "report.md").read_text()
    rows = [dict(r) for r in summary["results"]]
    rows[1]["errors"] = 2
    report = _report({**summary, "results": rows})
    assert "counted as wrong" in report and "single:gemma3-27b-cot 2." in report
    assert "puppeteer (trained) 0" not in report


def test_the_trained_router_calls_one_agent_and_beats_the_weak_one(run: tuple[Path, dict]) -> None:
    _, summary = run
    rows = {r["policy"]: r for r in summary["results"]}
    trained = rows["puppeteer (trained)"]
    assert trained["calls"] == 1.0  # max_steps=1, min_steps=1: one agent per item, never an empty episode
    # gpt5-cot is right on ~100% of arith, gemma3-27b-cot on ~41% (the paper's table the simulator follows)
    assert trained["accuracy"] > rows["single:gemma3-27b-cot"]["accuracy"]


def test_without_declared_speeds_the_report_compares_tokens(run: tuple[Path, dict]) -> None:
    out, summary = run
    assert summary["cost"] == "tokens" and all(r["model_s"] is None for r in summary["results"])
    assert (out / "pareto.png").stat().st_size > 0
    assert summary["headline"] is not None and "tokens per item" in summary["headline"]


def test_the_default_cost_model_prices_model_seconds_and_names_the_best_single_agent(
    timed: tuple[Path, dict],
) -> None:
    out, summary = timed
    assert summary["cost"] == "model_s"
    rows = {r["policy"]: r for r in summary["results"]}
    pool = load_pool(str(out / "pool.yaml")).subset(SIM.agents)
    for name, folder in (("puppeteer (trained)", "puppeteer"), ("single:gpt5-cot", "single_gpt5-cot")):
        trajs = list(read_trajectories(out / "eval" / folder / "trajectories.jsonl"))
        by_hand = np.mean([pool.model_seconds(t.steps) for t in trajs])
        assert rows[name]["model_s"] == pytest.approx(by_hand)
    assert rows["single:gpt5-cot"]["model_s"] > 0
    # the only single agent among the baselines is the one the headline compares with
    assert "best single agent, single:gpt5-cot" in summary["headline"]
    # with its exact McNemar p on the items both were evaluated on, as `puppeteer ab` computes it
    trained_c = [t.correct for t in read_trajectories(out / "eval" / "puppeteer" / "trajectories.jsonl")]
    single_c = [t.correct for t in read_trajectories(out / "eval" / "single_gpt5-cot" / "trajectories.jsonl")]
    p = mcnemar_exact(single_c, trained_c).p_value
    assert f"exact McNemar p = {p:.2g}" in summary["headline"]
    report = (out / "report.md").read_text()
    assert "| model s |" in report and summary["headline"] in report and "pareto.png" in report
    assert (out / "pareto.png").stat().st_size > 0


def test_headline_takes_the_most_accurate_single_agent_and_the_cheaper_on_a_tie() -> None:
    rows = [
        {"policy": "puppeteer (trained)", "accuracy": 0.5, "model_s": 10.0, "tokens": 100.0},
        {"policy": "single:a", "accuracy": 0.6, "model_s": 40.0, "tokens": 400.0},
        {"policy": "single:b", "accuracy": 0.6, "model_s": 20.0, "tokens": 300.0},
        {"policy": "vote:3", "accuracy": 0.9, "model_s": 90.0, "tokens": 900.0},  # not a single agent
    ]
    assert cost_axis(rows)[0] == "model_s"
    assert headline(rows) == (
        "The trained router scores 0.50 at 10.0 model s per item; the best single agent, single:b, "
        "0.60 at 20.0: -10 points at 0.50x its model s."
    )
    rows[1]["model_s"] = None  # one row without speeds: every row falls back to tokens
    assert cost_axis(rows)[0] == "tokens"
    assert headline(rows).endswith("single:b, 0.60 at 300.0: -10 points at 0.33x its tokens.")
    assert headline(rows[:1]) is None


def test_the_seed_varies_the_training_not_the_items(tmp_path: Path) -> None:
    """Another seed trains and samples anew on the same items: the shipped outcome table holds the items
    of the suite's own order, and a seed that picked others would call models the table lacks."""
    with (tmp_path / "log").open("w") as log:
        run_quickstart(
            replace(SIM, seed=1, trajectories=True),
            tmp_path,
            cache=tmp_path / "c.sqlite",
            console=Console(file=log),
        )
    held_out = [t.task_id for t in read_trajectories(tmp_path / "eval" / "puppeteer" / "trajectories.jsonl")]
    assert held_out == [t.id for t in load_suite(SIM.suite, "test", n=SIM.n_eval)]
    trained_on = {t.task_id for t in read_trajectories(tmp_path / "train" / "trajectories.jsonl")}
    assert trained_on <= {t.id for t in load_suite(SIM.suite, "train", n=SIM.n_train)}


def test_the_second_stage_learns_the_decision_after_the_fixed_routers_call(tmp_path: Path) -> None:
    """after_call_episodes: the saved one-call router stays the first decision (the held-out first calls
    of both rows match item by item), the decision after its call is trained on top (9 episodes an
    item here: 3 agents, every second action and stopping), and both rows are reported."""
    cfg = replace(SIM, after_call_episodes=72, baselines=("random",), trajectories=True)
    with (tmp_path / "log").open("w") as log:
        summary = run_quickstart(cfg, tmp_path, cache=tmp_path / "c.sqlite", console=Console(file=log))
    rows = {r["policy"]: r for r in summary["results"]}
    assert list(rows) == ["puppeteer (trained)", "puppeteer (one call: the first stage)", "random"]
    assert (
        summary["after_call_episodes"] == 72 and rows["puppeteer (one call: the first stage)"]["calls"] == 1
    )
    assert 1.0 <= rows["puppeteer (trained)"]["calls"] <= 2.0
    lines = (tmp_path / "train-after-call" / "trajectories.jsonl").read_text().splitlines()
    assert len(lines) == 72 and (tmp_path / "policy-after-call" / "policy.pt").exists()
    firsts = {
        name: [
            t.steps[0].agent_id for t in read_trajectories(tmp_path / "eval" / name / "trajectories.jsonl")
        ]
        for name in ("puppeteer", "puppeteer-one-call")
    }
    assert firsts["puppeteer"] == firsts["puppeteer-one-call"]
    assert "the decision after the router's call" in (tmp_path / "report.md").read_text()


def test_no_warning_about_the_quickstarts_own_group_sizes(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The default second stage (131,072 episodes in groups of 9) warned "trainer.episodes=131072 is not a
    multiple of the group size 9", about groups the user never chose; the report states what ran."""
    cfg = replace(SIM, episodes=66, baselines=("random",))  # groups of 4: 68 episodes run
    with caplog.at_level("WARNING"), (tmp_path / "log").open("w") as log:
        summary = run_quickstart(cfg, tmp_path, cache=tmp_path / "c.sqlite", console=Console(file=log))
    assert summary["episodes"] == 68 and "68 REINFORCE episodes" in (tmp_path / "report.md").read_text()
    assert not [r for r in caplog.records if r.levelname == "WARNING"], caplog.text


def test_the_command_keeps_training_trajectories_only_on_request(monkeypatch: pytest.MonkeyPatch) -> None:
    from puppeteer.cli import main

    seen: list[QuickstartConfig] = []
    monkeypatch.setattr("puppeteer.jobs.quickstart.run_quickstart", lambda cfg, *a, **k: seen.append(cfg))
    assert main(["quickstart", "--episodes", "8"]) == 0
    assert main(["quickstart", "--episodes", "8", "--trajectories"]) == 0
    assert [c.trajectories for c in seen] == [False, True] and seen[0].episodes == 8
    assert main(["quickstart", "--pool", "sim-local"]) == 0  # the same job on the calibrated simulator
    assert [c.pool for c in seen] == ["local-mix", "local-mix", "sim-local"]
    # the table with second steps: the eight solvers and the verifier, baselines named by the user
    argv = ["quickstart", "--pool", "local-mix-steps", "--agents", "qwen1.5b-pot, qwen0.5b-verify"]
    assert main([*argv, "--baselines", "single:qwen1.5b-pot"]) == 0
    assert seen[-1].agents == ("qwen1.5b-pot", "qwen0.5b-verify")
    assert seen[-1].baselines == ("single:qwen1.5b-pot",)
    assert seen[0].baselines == QuickstartConfig().baselines
    # how many principal directions of the question the router reads: a number, or the whole embedding
    assert main(["quickstart", "--task-dims", "3"]) == 0 and seen[-1].task_dims == 3
    assert main(["quickstart", "--task-dims", "all"]) == 0 and seen[-1].task_dims is None
    assert seen[0].task_dims == QuickstartConfig().task_dims == 8
    for bad in ("0", "three"):
        with pytest.raises(SystemExit):
            main(["quickstart", "--task-dims", bad])


def test_over_seeds_the_headline_gives_the_mean_and_the_worst_against_the_rule_and_the_single() -> None:
    rows = [
        {"policy": "puppeteer (trained) seed 3", "accuracy": 0.70, "model_s": 10.0, "tokens": 1.0},
        {"policy": "puppeteer (trained) seed 4", "accuracy": 0.60, "model_s": 14.0, "tokens": 1.0},
        {"policy": "best-rule:200", "accuracy": 0.68, "model_s": 10.0, "tokens": 1.0},
        {"policy": "best-single:200", "accuracy": 0.62, "model_s": 12.0, "tokens": 1.0},
        {"policy": "random", "accuracy": 0.35, "model_s": 12.0, "tokens": 1.0},
    ]
    # mean 0.65 at 12 s; against the rule +2 and -8 points (mean -3.0, worst -8.0), 12/10 = 1.20x;
    # against the single +8 and -2 (mean +3.0, worst -2.0), 12/12 = 1.00x
    assert headline(rows) == (
        "Over 2 seeds the trained router scores 0.650 on average (worst seed 0.600) at 12.0 model s per "
        "item; the best rule, best-rule:200, 0.68 at 10.0: -3.0 points on average, -8.0 for the worst seed, "
        "at 1.20x its model s; the best single agent, best-single:200, 0.62 at 12.0: +3.0 points on "
        "average, -2.0 for the worst seed, at 1.00x its model s."
    )


def test_the_pooled_test_pairs_every_seed_with_the_reference_on_the_items_both_graded() -> None:
    rule = {"a": True, "b": True, "c": False, "d": False}
    seed_1 = {"a": True, "b": False, "c": True, "d": True}  # 1 lost, 2 won
    seed_2 = {"a": False, "b": True, "c": True, "x": True}  # 1 lost, 1 won; "x" unpaired
    test = pooled_mcnemar([seed_1, seed_2], rule)
    assert (test.n, test.only_a, test.only_b) == (7, 2, 3)
    assert test.p_value == pytest.approx(1.0)  # 3 of 5 discordant pairs: binomial two-sided p = 1


def test_several_seeds_and_the_fitted_rules_in_one_run(tmp_path: Path) -> None:
    """--seeds 2: two routers (their own train/, policy/ and evaluation folders), the rules fitted on the
    same training items and evaluated once, and the headline's pooled test recomputed from the rows'
    per-item grades."""
    cfg = replace(SIM, seeds=2, seed=5, rules=("best-rule", "best-single"), baselines=("random",))
    with (tmp_path / "log").open("w") as log:
        summary = run_quickstart(cfg, tmp_path, cache=tmp_path / "c.sqlite", console=Console(file=log))
    names = [r["policy"] for r in summary["results"]]
    assert names == [
        "puppeteer (trained) seed 5",
        "puppeteer (trained) seed 6",
        f"best-rule:{SIM.n_train}",
        f"best-single:{SIM.n_train}",
        "random",
    ]
    assert summary["seeds"] == [5, 6]
    for seed in (5, 6):
        assert (tmp_path / f"seed{seed}" / "policy" / "policy.pt").exists()
        assert (tmp_path / "eval" / f"puppeteer-seed{seed}" / "trajectories.jsonl").exists()
    grades = {
        folder: {
            t.task_id: t.correct for t in read_trajectories(tmp_path / "eval" / folder / "trajectories.jsonl")
        }
        for folder in ("puppeteer-seed5", "puppeteer-seed6", f"best-rule_{SIM.n_train}")
    }
    test = pooled_mcnemar(
        [grades["puppeteer-seed5"], grades["puppeteer-seed6"]], grades[f"best-rule_{SIM.n_train}"]
    )
    assert test.n == 2 * SIM.n_eval
    assert summary["headline"].startswith("Over 2 seeds the trained router scores")
    assert f"(exact McNemar p = {test.p_value:.2g}, {test.n} (seed, item) pairs)" in summary["headline"]
    report = (tmp_path / "report.md").read_text()
    assert "Seeds 5 to 6" in report and "](seed5/learning_curve.png)" in report
    single = next(r for r in summary["results"] if r["policy"].startswith("best-single"))
    assert single["calls"] == 1.0
    # every arm on the same held-out draws: where two arms made the same first call on an item, the
    # simulator gave it the same completion (its length is drawn from the episode's sample seed)
    first_calls = {
        folder: {
            t.task_id: (t.steps[0].agent_name, t.steps[0].completion.completion_tokens)
            for t in read_trajectories(tmp_path / "eval" / folder / "trajectories.jsonl")
        }
        for folder in ("puppeteer-seed5", "puppeteer-seed6", f"best-single_{SIM.n_train}", "random")
    }
    shared = [
        (a[item], b[item])
        for a, b in itertools.combinations(first_calls.values(), 2)
        for item in a
        if a[item][0] == b[item][0]
    ]
    assert len(shared) >= SIM.n_eval and all(x == y for x, y in shared), shared


def test_backward_induction_learns_after_every_first_call_then_the_first_call_again(tmp_path: Path) -> None:
    """first_again_episodes: the decision after a call is learned after every first call (3 agents x 4
    second actions = 12 episodes an item, the router fixed), then the first call again with that
    decision fixed (its later scorer's weights are those saved after the second stage)."""
    import torch

    from puppeteer.policies.puppeteer import PuppeteerPolicy

    cfg = replace(
        SIM, after_call_episodes=96, first_again_episodes=96, baselines=("random",), trajectories=True
    )
    with (tmp_path / "log").open("w") as log:
        summary = run_quickstart(cfg, tmp_path, cache=tmp_path / "c.sqlite", console=Console(file=log))
    assert summary["after_call_episodes"] == 96 and summary["first_again_episodes"] == 96
    for stage in ("after-call", "first-again"):
        lines = (tmp_path / f"train-{stage}" / "trajectories.jsonl").read_text().splitlines()
        firsts = [json.loads(x)["steps"][0]["agent_id"] for x in lines]
        assert len(lines) == 96 and sorted(set(firsts)) == [0, 1, 2]  # every first call, every item
    pool = load_pool("sim-paper").subset(list(SIM.agents))
    second = PuppeteerPolicy.load(tmp_path / "policy-after-call", pool)
    final = PuppeteerPolicy.load(tmp_path / "policy-first-again", pool)
    assert second.scorer.later is not None and final.scorer.later is not None
    for (name, a), b in zip(
        second.scorer.later.state_dict().items(), final.scorer.later.state_dict().values(), strict=True
    ):
        torch.testing.assert_close(a, b, msg=name)  # the decision after the call: kept fixed
    first = [n for n in second.scorer.state_dict() if not n.startswith("later.")]
    assert any(
        not torch.equal(second.scorer.state_dict()[n], final.scorer.state_dict()[n]) for n in first
    )  # the first call: learned again
    assert (tmp_path / "learning_curve_first_again.png").stat().st_size > 1000
    assert "backward induction" in (tmp_path / "report.md").read_text()
    with pytest.raises(ValueError, match="first_again_episodes"):
        replace(SIM, after_call_episodes=0, first_again_episodes=96)
