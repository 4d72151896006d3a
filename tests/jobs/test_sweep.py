from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pandas as pd
import pytest

from puppeteer.analytics.sweep import (
    ConductorTrack,
    PuppeteerTrack,
    gather,
    markdown,
    pareto_labels,
    plot_sweep,
    summarize,
)
from puppeteer.cli import main
from puppeteer.jobs.sweep import ConductorSweep, with_defaults

# (lambda, seed) -> (accuracy, mean tokens) of the fake trained policies
FAKE = {(0.0, 0): (0.90, 900.0), (0.0, 1): (0.80, 1100.0), (0.5, 0): (0.60, 100.0), (0.5, 1): (0.70, 300.0)}
BASELINES = {"single:big": (0.95, 2000.0), "single:small": (0.50, 500.0)}


def _fake_runs(out: Path) -> None:
    for lam, seed in FAKE:
        d = out / f"lam{lam}_seed{seed}"
        d.mkdir(parents=True)
        cfg = {
            "lam": lam,
            "seed": seed,
            "max_steps": 3,
            "pool": {"name": "sim-paper"},
            "suite": {"name": "arith", "eval_split": "test", "n_eval": 10},
        }
        (d / "config.json").write_text(json.dumps(cfg))
        (d / "results.json").write_text("{}")
    (out / "unfinished").mkdir()
    (out / "unfinished" / "config.json").write_text(json.dumps({"lam": 9.0, "seed": 0}))


def _fake_evaluate(spec: str, **kw: Any) -> SimpleNamespace:
    if spec.startswith("puppeteer:"):
        d = Path(spec.split(":", 1)[1]).parent
        cfg = json.loads((d / "config.json").read_text())
        acc, tokens = FAKE[(cfg["lam"], cfg["seed"])]
    else:
        acc, tokens = BASELINES[spec]
    assert kw["split"] == "test" and kw["n"] == 10 and kw["pool"] == "sim-paper"
    return SimpleNamespace(
        policy=spec,
        n=10,
        accuracy=acc,
        ci_low=acc - 0.1,
        ci_high=acc + 0.1,
        mean_tokens=tokens,
        mean_usd=tokens / 1e6,
        mean_calls=1.0,
        mean_reward=acc,
        mean_model_s=tokens / 100.0,  # as if every token took 10 ms alone
        backends=("sim",),
    )


def test_gather_summarize_and_pareto(tmp_path: Path) -> None:
    _fake_runs(tmp_path)
    df = gather(tmp_path, PuppeteerTrack(), list(BASELINES), evaluate=_fake_evaluate, reevaluate=True)
    assert len(df) == 6 and (tmp_path / "sweep.csv").exists()
    s = summarize(df).set_index("lam")
    assert s.loc[0.0, "accuracy_mean"] == pytest.approx(0.85)
    assert s.loc[0.0, "accuracy_std"] == pytest.approx(pd.Series([0.9, 0.8]).std())
    assert s.loc[0.5, "tokens_mean"] == pytest.approx(200.0)
    assert list(s["seeds"]) == [2, 2]
    # means: lambda=0.5 (200 tok, 0.65), lambda=0 (1000, 0.85); baselines small (500, 0.50), big (2000, 0.95)
    assert pareto_labels(df) == ["lambda=0.5", "lambda=0", "single:big"]
    md = markdown(df)
    assert "| 0.5 | 2 | 0.650 +- 0.071 |" in md and "`single:small`" in md
    assert plot_sweep(df, tmp_path / "s.png", "test [backend: sim]").stat().st_size > 5000


def test_a_fitted_rule_is_one_point_per_swept_lambda_chosen_at_that_lambda(tmp_path: Path) -> None:
    """best-rule is chosen on training items at a lambda: the sweep evaluates it at every swept value
    (0 and 0.5 here), each labelled with its lambda; a fixed baseline stays one point."""
    _fake_runs(tmp_path)
    seen: list[tuple[str, float]] = []

    def evaluate(spec: str, **kw: Any) -> SimpleNamespace:
        if spec == "best-rule":
            seen.append((spec, kw["lam"]))
            acc = {0.0: 0.93, 0.5: 0.75}[kw["lam"]]
            return replace_ns(_fake_evaluate("single:big", **kw), policy=spec, accuracy=acc)
        return _fake_evaluate(spec, **kw)

    df = gather(tmp_path, PuppeteerTrack(), ["best-rule", "single:small"], evaluate=evaluate, reevaluate=True)
    rules = df[df["policy"].str.startswith("best-rule")]
    assert seen == [("best-rule", 0.0), ("best-rule", 0.5)]
    assert list(rules["policy"]) == ["best-rule (lam 0)", "best-rule (lam 0.5)"]
    assert list(rules["accuracy"]) == [0.93, 0.75] and list(rules["lam"]) == [0.0, 0.5]
    assert len(df[df["policy"] == "single:small"]) == 1
    assert "`best-rule (lam 0.5)`" in markdown(df)


def replace_ns(ns: SimpleNamespace, **changes: Any) -> SimpleNamespace:
    return SimpleNamespace(**{**vars(ns), **changes})


def test_model_seconds_axis(tmp_path: Path) -> None:
    _fake_runs(tmp_path)
    df = gather(tmp_path, PuppeteerTrack(), list(BASELINES), evaluate=_fake_evaluate, reevaluate=True)
    s = summarize(df, "model_s").set_index("lam")
    assert s.loc[0.5, "model_s_mean"] == pytest.approx(2.0)  # (100 + 300) / 2 tokens at 10 ms
    assert pareto_labels(df, "model_s") == ["lambda=0.5", "lambda=0", "single:big"]
    assert "model_s/item" in markdown(df, "model_s")


def test_sweep_defaults_keep_user_overrides() -> None:
    assert with_defaults(["min_steps=0", "pool=sim-paper"]) == [
        "min_steps=0",
        "pool=sim-paper",
        "wandb.enabled=false",
        "progress=false",
    ]
    assert "min_steps=1" in with_defaults([])


def test_sweep_command_trains_and_gathers_on_the_simulator(tmp_path: Path) -> None:
    out = tmp_path / "sweep"
    assert (
        main(
            [
                "sweep",
                "--lam",
                "0,0.5",
                "--seeds",
                "1",
                "--out",
                str(out),
                "--baselines",
                "single:gpt5-cot",
                "trainer.episodes=32",
                "trainer.batch_episodes=32",
                "policy.encoder=hashing",
                "suite.n_eval=10",
                "suite.n_val=10",
                "max_steps=2",
            ]
        )
        == 0
    )
    df = pd.read_csv(out / "sweep.csv")
    assert sorted(df["lam"].dropna()) == [0.0, 0.5] and (df["kind"] == "baseline").sum() == 1
    assert set(df["backend"]) == {"sim"} and set(df["n"]) == {10}
    trained = df[df["kind"] == "trained"].set_index("lam")
    for lam in (0.0, 0.5):  # rows of trained runs are the held-out numbers their training job wrote
        heldout = json.loads((out / f"lam{lam}_seed0" / "results.json").read_text())["heldout"]
        assert trained.loc[lam, "accuracy"] == heldout["accuracy"]
        assert trained.loc[lam, "mean_tokens"] == heldout["tokens"]
    cfg = json.loads((out / "lam0.5_seed0" / "config.json").read_text())
    assert cfg["min_steps"] == 1 and cfg["lam"] == 0.5
    assert (out / "sweep.png").stat().st_size > 5000 and "backend: sim" in (
        out / "sweep.md"
    ).read_text().lower()


# ----------------------------------------------------------------------------- the conductor track
def _conductor_run(
    out: Path, lam: float, seed: int, heldout: dict[str, Any], cost_model: str = "tokens"
) -> None:
    d = out / f"workflow_lam{lam}_seed{seed}"
    d.mkdir(parents=True)
    cfg = {
        "track": "conductor",
        "workflow_lam": lam,
        "seed": seed,
        "workflow_max_steps": 4,
        "n_eval": 10,
        "cost_model": cost_model,
        "pool": {"name": "sim-paper"},
        "suite": {"name": "arith", "eval_split": "test", "n_eval": 50},
    }
    (d / "config.json").write_text(json.dumps(cfg))
    res = {"backend": "conductor = transformers on CPU (x), workers = sim", "heldout_after": heldout}
    (d / "results.json").write_text(json.dumps(res))


def _heldout(acc: float, **kw: float) -> dict[str, Any]:
    return {
        "n": 10,
        "accuracy": acc,
        "accuracy_ci95": [acc - 0.2, acc + 0.1],
        "parse_rate": 0.9,
        "reward": acc - 0.05,
        "calls": 2.0,
        "cost": 1.5,
        **kw,
    }


def test_conductor_track_rows_are_the_runs_heldout_after_numbers(tmp_path: Path) -> None:
    _conductor_run(tmp_path, 0.0, 0, _heldout(0.8, tokens=1400.0, usd=0.002))
    _conductor_run(tmp_path, 0.2, 0, _heldout(0.6))  # written before the summary had tokens/usd
    seen: dict[str, Any] = {}

    def evaluate(spec: str, **kw: Any) -> SimpleNamespace:
        seen.update(kw)
        return _fake_evaluate("single:big", **{**kw, "n": 10, "split": "test", "pool": "sim-paper"})

    df = gather(tmp_path, ConductorTrack(), ["single:big"], evaluate=evaluate)
    trained = df[df["kind"] == "trained"].set_index("lam")
    assert trained.loc[0.0, "accuracy"] == 0.8 and trained.loc[0.0, "mean_tokens"] == 1400.0
    assert trained.loc[0.0, "mean_usd"] == 0.002 and trained.loc[0.0, "parse_rate"] == 0.9
    assert (trained.loc[0.0, "ci_low"], trained.loc[0.0, "ci_high"]) == pytest.approx((0.6, 0.9))
    # cost 1.5 in the tokens cost model = 1.5 thousand tokens per item
    assert trained.loc[0.2, "mean_tokens"] == 1500.0 and pd.isna(trained.loc[0.2, "mean_usd"])
    assert trained.loc[0.0, "policy"] == f"conductor:grpo:{tmp_path / 'workflow_lam0.0_seed0'}"
    assert trained.loc[0.2, "mean_reward"] == pytest.approx(0.55)
    # baselines are evaluated like the runs' held-out split: n_eval and workflow_max_steps of the run config
    assert (seen["n"], seen["max_steps"], seen["suite"], seen["split"]) == (10, 4, "arith", "test")


def test_conductor_sweep_defaults_leave_out_the_puppeteer_only_keys() -> None:
    track = ConductorSweep()
    assert track.param == "workflow_lam" and track.reevaluable and isinstance(track, ConductorTrack)
    # configs/conductor.yaml has no min_steps or progress key: overriding them would fail
    assert with_defaults([], track.defaults) == ["wandb.enabled=false"]


def test_conductor_sweep_trains_one_grpo_run_per_lambda_and_seed(tmp_path: Path) -> None:
    """``puppeteer sweep --track conductor``: Hydra multirun of ``puppeteer train track=conductor``."""
    pytest.importorskip("trl")
    out = tmp_path / "sweep"
    tiny = [
        "conductor=cpu-smollm2",
        "model.id=tiny-random",
        "n_train=4",
        "n_eval=3",
        "eval.before=false",
        "eval.max_new_tokens=8",
        "eval.batch_size=3",
        "grpo.max_steps=1",
        "grpo.max_completion_length=8",
        "grpo.num_generations=2",
        "grpo.per_device_train_batch_size=2",
        "grpo.gradient_accumulation_steps=1",
        "grpo.save_steps=1",
    ]
    argv = [
        "sweep",
        "--track",
        "conductor",
        "--lam",
        "0,0.5",
        "--seeds",
        "1",
        "--out",
        str(out),
        "--baselines",
        "single:gpt5-cot",
        *tiny,
    ]
    assert main(argv) == 0
    df = pd.read_csv(out / "sweep.csv")
    trained = df[df["kind"] == "trained"].set_index("lam")
    assert sorted(trained.index) == [0.0, 0.5] and (df["kind"] == "baseline").sum() == 1
    assert set(df["n"]) == {3}
    for lam in (0.0, 0.5):
        run = out / f"workflow_lam{lam}_seed0"
        cfg = json.loads((run / "config.json").read_text())
        res = json.loads((run / "results.json").read_text())
        assert cfg["workflow_lam"] == lam and cfg["track"] == "conductor" and res["steps"] == 1
        h = res["heldout_after"]
        assert trained.loc[lam, "accuracy"] == h["accuracy"]
        assert trained.loc[lam, "mean_tokens"] == h["tokens"]  # 0 when the random model parses nothing
        assert trained.loc[lam, "parse_rate"] == h["parse_rate"]
        assert "tiny-random" in trained.loc[lam, "backend"] and (run / "final" / "config.json").is_file()
    md = (out / "sweep.md").read_text()
    assert "| 0.5 | 1 |" in md and "`single:gpt5-cot`" in md
    assert (out / "sweep.png").stat().st_size > 5000
    # --reevaluate: each trained conductor as `conductor:grpo:RUN`, per-item trajectories, the same numbers
    assert main([*argv[:9], "--gather-only", "--reevaluate", *argv[9:]]) == 0
    again = pd.read_csv(out / "sweep.csv")
    again = again[again["kind"] == "trained"].set_index("lam")
    for lam in (0.0, 0.5):
        run = out / f"workflow_lam{lam}_seed0"
        assert again.loc[lam, "policy"] == f"conductor:grpo:{run}"
        assert again.loc[lam, "accuracy"] == trained.loc[lam, "accuracy"]
        assert len((run / "eval" / "trajectories.jsonl").read_text().splitlines()) == 3


def test_a_sweep_on_some_agents_of_a_pool_trains_and_evaluates_on_those_agents_only(tmp_path: Path) -> None:
    out = tmp_path / "sweep"
    agents = ["gemma3-27b-cot", "gpt5-cot"]
    args = ["sweep", "--lam", "0", "--seeds", "1", "--out", str(out), "--reevaluate", "--baselines"]
    args += ["single:gpt5-cot", "trainer.episodes=32", "trainer.batch_episodes=32", "policy.encoder=hashing"]
    args += ["suite.n_eval=10", "suite.n_val=10", "max_steps=2", f"pool.agents=[{','.join(agents)}]"]
    assert main(args) == 0
    run = out / "lam0.0_seed0"
    assert json.loads((run / "config.json").read_text())["pool"]["agents"] == agents
    steps = [json.loads(line)["steps"] for line in (run / "eval" / "trajectories.jsonl").open()]
    assert len(steps) == 10 and {s["agent_name"] for ep in steps for s in ep} <= set(agents)
    results = json.loads((run / "eval" / "results.json").read_text())
    assert results["pool"] == f"sim-paper[{','.join(agents)}]"
    # an agent the pool lacks fails before any training, naming the agents it knows
    assert main(
        ["sweep", "--lam", "0", "--seeds", "1", "--out", str(tmp_path / "bad"), "pool.agents=[nobody]"]
    )
    assert not list((tmp_path / "bad").rglob("*.pt"))


def test_gather_replays_the_runs_response_cache_on_model_calling_pools(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Re-evaluations and baselines on a llama.cpp pool use the cache the training used (its calls
    replay); on the simulator there is no cache; ``cache=off`` in the runs' config turns it off."""
    monkeypatch.setenv("PUPPETEER_RESPONSE_CACHE", str(tmp_path / "shared.sqlite"))
    seen: list[Any] = []

    def evaluate(spec: str, **kw: Any) -> SimpleNamespace:
        seen.append(kw["cache"])
        return _fake_evaluate(spec, **{**kw, "pool": "sim-paper"})

    for pool, cache, expected in [
        ("local-v2", None, tmp_path / "shared.sqlite"),
        ("local-v2", str(tmp_path / "mine.sqlite"), tmp_path / "mine.sqlite"),
        ("local-v2", "off", None),
        ("sim-paper", None, None),
    ]:
        out = tmp_path / f"{pool}-{Path(str(cache)).name}"
        _fake_runs(out)
        for cfg_path in out.glob("lam*/config.json"):
            cfg = json.loads(cfg_path.read_text())
            cfg_path.write_text(json.dumps({**cfg, "pool": {"name": pool}, "cache": cache}))
        seen.clear()
        gather(out, PuppeteerTrack(), list(BASELINES), evaluate=evaluate, reevaluate=True)
        assert seen == [expected] * 6, (pool, cache)
