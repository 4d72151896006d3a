"""The per-agent table and reference routers read from an outcome table (no model)."""

from __future__ import annotations

import pytest

from puppeteer.analytics.outcome_table import agent_rows, best, bykind_spec, complete_items, markdown, matrix
from puppeteer.backends.replay import Outcome


def _o(split: str, task: str, agent: str, correct: bool, model_s: float, **kw: object) -> Outcome:
    return Outcome(
        "mix", split, task, task.split("/")[0], agent, correct, None, 10, 5, model_s, False, 0, **kw
    )


def _table() -> list[Outcome]:
    """`cheap` is right on every `easy` item, `strong` on every item; `cheap` costs 1 s, `strong` 10 s."""
    rows = []
    for split in ("train", "test"):
        for i in range(4):
            for kind in ("easy", "hard"):
                task = f"{kind}/{split}{i}"
                rows.append(_o(split, task, "cheap", kind == "easy", 1.0))
                rows.append(_o(split, task, "strong", True, 10.0))
    rows.append(_o("test", "easy/extra", "cheap", True, 1.0))  # only one agent ran it: left out
    return rows


def test_agent_rows_count_per_kind_on_the_items_every_agent_ran() -> None:
    rows = agent_rows(_table(), "test", ["cheap", "strong"])
    by = {(r.agent, r.kind): r for r in rows}
    assert by[("cheap", "all")].n == 8 and by[("cheap", "all")].accuracy == 0.5
    assert by[("cheap", "easy")].accuracy == 1.0 and by[("cheap", "hard")].accuracy == 0.0
    assert by[("strong", "all")].model_s == 10.0 and by[("strong", "all")].ci[0] > 0.6
    assert best(rows).agent == "strong" and best(rows, "easy").agent == "cheap"  # a tie goes to the cheaper
    assert "easy/extra" not in complete_items(_table(), "test", ["cheap", "strong"])
    assert matrix(_table(), "test", ["cheap", "strong"]).correct.shape == (8, 2)


def test_the_markdown_has_the_reference_routers_and_the_bykind_spec() -> None:
    text = markdown(_table(), "test", ["cheap", "strong"])
    assert bykind_spec(matrix(_table(), "train", ["cheap", "strong"])) == "bykind:easy=cheap,hard=strong"
    assert "`bykind:easy=cheap,hard=strong`" in text
    # the per-kind router: all right at (1 + 10) / 2 s; the best single agent: all right at 10 s
    assert "| best agent per domain (chosen on train) | 1.000 | 5.5 |" in text
    assert "| single:strong | 1.000 | 10.0 |" in text
    assert markdown(_table(), "validation", ["cheap"]).startswith("No split `validation`")


@pytest.mark.parametrize("split", ["train", "test"])
def test_best_is_the_most_accurate(split: str) -> None:
    assert best(agent_rows(_table(), split, ["cheap", "strong"]), "hard").agent == "strong"
