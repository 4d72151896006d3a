"""Training on a replayed pool: every item it reads is in the table, or it refuses before any work."""

from __future__ import annotations

import pytest

from puppeteer.jobs.replay_check import ReplayCoverageError, check_replay_coverage, needs_of


def _cfg(**suite: object) -> dict:
    base = {"name": "mix-local", "n_train": 200, "n_val": 50, "n_eval": 320, "val_split": "train"}
    return {"pool": {"name": "local-mix"}, "suite": {**base, **suite}}


def test_a_run_inside_the_shipped_table_passes() -> None:
    check_replay_coverage(_cfg())


@pytest.mark.parametrize(
    ("suite", "split", "key", "count"),
    [
        ({"n_train": 256}, "train", "suite.n_train", "56 of the 256"),  # the table holds 200 train items
        ({"val_split": "validation"}, "validation", "suite.n_val", "50 of the 50"),  # a split it lacks
    ],
)
def test_a_run_that_needs_items_the_table_lacks_is_refused_naming_them(
    suite: dict, split: str, key: str, count: str
) -> None:
    with pytest.raises(ReplayCoverageError) as err:
        check_replay_coverage(_cfg(**suite))
    line = str(err.value)
    assert "\n" not in line
    assert f"{count} {split!r} items of suite mix-local that {key} asks for" in line
    assert "the table holds the splits: test, train" in line


def test_with_replay_off_nothing_is_checked(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("PUPPETEER_REPLAY", "off")
    check_replay_coverage(_cfg(n_train=256))


def test_a_pool_without_a_table_and_a_split_of_size_zero_are_not_checked() -> None:
    check_replay_coverage({"pool": {"name": "sim-paper"}, "suite": {"name": "arith", "n_train": 10**6}})
    assert [n.split for n in needs_of(_cfg(n_val=0))] == ["train", "test"]
