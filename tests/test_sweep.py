from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pandas as pd
import pytest

from puppeteer.analytics.sweep import (
    PuppeteerTrack,
    gather,
    markdown,
    pareto_labels,
    plot_sweep,
    summarize,
    with_defaults,
)
from puppeteer.cli import main

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
