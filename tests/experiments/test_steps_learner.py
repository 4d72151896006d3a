"""experiments/steps-learner/objective.py: the best fits of the two objectives of the decision after a
call, by hand on a toy group of items."""

from __future__ import annotations

import pytest

from tests.experiment_modules import experiment_module

objective = experiment_module("steps-learner", "objective")


def _item(escalate: float, right: bool) -> dict:
    return {
        "task_id": "x/1",
        "kind": "x",
        "signals": [1.0, 0.0],
        "actions": {
            "stop": {"return": 0.0, "correct": False, "model_s": 1.0},
            "escalate": {"return": escalate, "correct": right, "model_s": 3.0},
        },
    }


def test_the_mean_of_boltzmann_targets_stops_where_the_mean_return_escalates() -> None:
    # one item of four is fixed by escalating (return 0.9), three pay its price for nothing (-0.1):
    # mean return 0.15 > 0 for escalating; per item, softmax(Q / 0.1) puts 0.731 on stopping in three
    # items and 0.9999 on escalating in one: mean 0.548 on stopping
    rows = [_item(0.9, True), *(_item(-0.1, False) for _ in range(3))]
    fits = objective.fit(rows, t=0.1)
    assert fits["target"] == {("x", (1.0, 0.0)): "stop"}
    assert fits["soft"] == {("x", (1.0, 0.0)): "escalate"}
    soft, target = objective.value(rows, fits["soft"]), objective.value(rows, fits["target"])
    assert soft["return"] == pytest.approx(0.15) and soft["accuracy"] == 0.25 and soft["model_s"] == 3.0
    assert target == {"accuracy": 0.0, "model_s": 1.0, "return": 0.0, "second_calls": 0}
    # a group no training item had: the policy stops
    unseen = [{**rows[0], "signals": [0.0, 1.0]}]
    assert objective.value(unseen, fits["soft"])["second_calls"] == 0
    # at a high temperature both fits agree on the mean
    assert objective.fit(rows, t=100.0)["target"] == {("x", (1.0, 0.0)): "escalate"}


@pytest.mark.data
def test_the_committed_fits_regenerate_from_the_shipped_table(
    tmp_path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every second action after each kind's first agent on all 520 items, replayed strictly: the
    committed results/objective_lam1.json comes back value for value."""
    import json
    import sys

    monkeypatch.setenv("PUPPETEER_REPLAY", "strict")
    out = tmp_path / "objective.json"
    monkeypatch.setattr(sys, "argv", ["objective.py", "--lam", "1", "--out", str(out)])
    objective.main()
    committed = objective.Path(objective.__file__).parent / "results" / "objective_lam1.json"
    assert json.loads(out.read_text()) == json.loads(committed.read_text())
