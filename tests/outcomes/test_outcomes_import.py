"""`puppeteer outcomes import`: the long and wide forms, every refusal, and the imported pool replayed."""

from __future__ import annotations

import gzip
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from puppeteer.agents.pool import load_pool
from puppeteer.cli import main
from puppeteer.envs.build import build_env
from puppeteer.envs.rollout import run_actions
from puppeteer.errors import UserError
from puppeteer.outcomes.importer import import_table
from puppeteer.outcomes.store import load_logged
from puppeteer.outcomes.table import Price, ReadOptions, read_logged
from puppeteer.tasks.suites import load_suite, split_sizes

LONG = pd.DataFrame(
    [
        # prompt_id, prompt, task, split, model, score, cost_usd
        ("p1", "What is 2+2?", "math", "train", "big", 1.0, 0.003),
        ("p1", "What is 2+2?", "math", "train", "small", 0.0, 0.001),
        ("p2", "Capital of France?", "qa", "train", "big", 1.0, 0.002),
        ("p2", "Capital of France?", "qa", "train", "small", 1.0, 0.0005),
        ("p3", "Write a haiku.", "gen", "test", "big", 0.5, 0.004),
        ("p3", "Write a haiku.", "gen", "test", "small", 0.0, 0.001),
        ("p4", "What is 3*3?", "math", "test", "big", 0.0, 0.003),
        ("p4", "What is 3*3?", "math", "test", "small", 1.0, 0.001),
    ],
    columns=["prompt_id", "prompt", "task", "split", "model", "score", "cost_usd"],
)


def _csv(tmp_path: Path, frame: pd.DataFrame, name: str = "logs.csv") -> Path:
    path = tmp_path / name
    frame.to_csv(path, index=False)
    return path


def _refused(tmp_path: Path, frame: pd.DataFrame, match: str, **opts: object) -> str:
    out = tmp_path / "out"
    with pytest.raises(UserError, match=match) as err:
        import_table([_csv(tmp_path, frame)], out, options=ReadOptions(**opts))  # type: ignore[arg-type]
    message = str(err.value)
    assert "\n" not in message
    assert not out.exists()
    assert [p.name for p in tmp_path.iterdir()] == ["logs.csv"]  # nothing half-written
    return message


def test_long_csv_imports_into_a_pool_and_suite(tmp_path: Path) -> None:
    done = import_table([_csv(tmp_path, LONG)], tmp_path / "mine")
    assert sorted(p.name for p in done.folder.iterdir()) == ["logged.csv.gz", "pool.yaml", "suite.yaml"]
    t = done.table
    assert t.models == ("big", "small") and t.prompt_ids == ("p1", "p2", "p3", "p4")
    np.testing.assert_allclose(t.score, [[1, 0], [1, 1], [0.5, 0], [0, 1]])
    pool = load_pool(done.pool)
    assert [a.name for a in pool.agents] == ["big", "small"] and pool.backends() == ("logged",)
    assert split_sizes(str(done.suite)) == {"test": 2, "train": 2}
    tasks = load_suite(str(done.suite), "train")
    assert sorted(t.id for t in tasks) == ["mine/p1", "mine/p2"]
    assert {t.domain for t in tasks} == {"math", "qa"}


def test_the_imported_pool_replays_its_scores_and_costs_in_the_env(tmp_path: Path) -> None:
    done = import_table([_csv(tmp_path, LONG)], tmp_path / "mine")
    env = build_env(
        None,
        pool=str(done.pool),
        suite=str(done.suite),
        split="train",
        mode="step",
        max_steps=1,
        cost_model="usd",
        lam=0.0,
    )
    stop = env.pool.terminator_id
    by_id = {t.id: i for i, t in enumerate(env.tasks)}
    for pid, model, right, usd in [
        ("p1", "big", True, 0.003),
        ("p1", "small", False, 0.001),
        ("p2", "small", True, 0.0005),
    ]:
        end = run_actions(
            env, [env.pool.index(model), stop], seed=0, options={"task_index": by_id[f"mine/{pid}"]}
        )
        assert end.correct is right
        assert end.cost == pytest.approx(usd * 100)  # the usd cost model counts cents


def test_a_fractional_score_is_right_for_that_share_of_prompts(tmp_path: Path) -> None:
    n = 400
    rows = [
        (f"q{i}", f"prompt {i}", "", "test" if i % 2 else "train", m, s, 0.001)
        for i in range(n)
        for m, s in (("a", 0.3), ("b", 1.0))
    ]
    done = import_table([_csv(tmp_path, pd.DataFrame(rows, columns=LONG.columns))], tmp_path / "frac")
    from puppeteer.backends.logged import LoggedBackend, draw, is_right

    backend = LoggedBackend(done.folder)
    rights = [is_right(0.3, draw(0, f"q{i}", "a")) for i in range(n)]
    assert abs(np.mean(rights) - 0.3) < 0.06
    assert backend.table.score[:, 1].min() == 1.0


def test_wide_form_gives_the_same_table(tmp_path: Path) -> None:
    wide = pd.DataFrame(
        {
            "prompt_id": ["p1", "p2", "p3", "p4"],
            "prompt": ["What is 2+2?", "Capital of France?", "Write a haiku.", "What is 3*3?"],
            "task": ["math", "qa", "gen", "math"],
            "split": ["train", "train", "test", "test"],
            "big": [1.0, 1.0, 0.5, 0.0],
            "big:cost_usd": [0.003, 0.002, 0.004, 0.003],
            "small": [0.0, 1.0, 0.0, 1.0],
            "small:cost_usd": [0.001, 0.0005, 0.001, 0.001],
        }
    )
    a = import_table([_csv(tmp_path, LONG, "long.csv")], tmp_path / "a", name="same")
    path = tmp_path / "wide.jsonl"
    wide.to_json(path, orient="records", lines=True)
    b = import_table([path], tmp_path / "b", name="same")
    assert gzip.decompress((a.folder / "logged.csv.gz").read_bytes()) == gzip.decompress(
        (b.folder / "logged.csv.gz").read_bytes()
    )


def test_parquet_and_tokens_with_a_price_table(tmp_path: Path) -> None:
    frame = LONG.drop(columns="cost_usd").assign(prompt_tokens=1000, completion_tokens=500)
    path = tmp_path / "logs.parquet"
    frame.to_parquet(path)
    prices = {"big": Price(2.0, 10.0), "small": Price(0.5, 1.0)}
    t = read_logged([path], ReadOptions(prices=prices))
    # big: (1000 * 2 + 500 * 10) / 1e6; small: (1000 * 0.5 + 500 * 1) / 1e6
    np.testing.assert_allclose(t.cost[0], [0.007, 0.001])
    with pytest.raises(UserError, match=r"no price for models \['small'\]"):
        read_logged([path], ReadOptions(prices={"big": Price(1, 1)}))


def test_refuses_a_duplicate_row(tmp_path: Path) -> None:
    _refused(
        tmp_path,
        pd.concat([LONG, LONG.iloc[:1]]),
        r"repeat a \(prompt_id, model\) pair \(first: 'p1', 'big'\)",
    )


def test_refuses_a_prompt_in_two_splits_unless_deduped(tmp_path: Path) -> None:
    leak = LONG.copy()
    leak.loc[leak["prompt_id"] == "p4", "prompt"] = "What is 2+2?"  # p4 (test) repeats p1 (train)
    msg = _refused(tmp_path, leak, "1 prompts appear in more than one split")
    assert "--dedupe-splits" in msg
    done = import_table([tmp_path / "logs.csv"], tmp_path / "out", options=ReadOptions(dedupe_splits=True))
    assert done.table.prompt_ids == ("p2", "p3", "p4")  # dropped from train, kept in test
    assert done.table.splits == ("train", "test", "test")


def test_refuses_a_missing_cell_unless_dropped(tmp_path: Path) -> None:
    hole = LONG.copy()
    hole.loc[3, "score"] = None
    _refused(tmp_path, hole, r"1 missing scores on 1 prompts \(first: 'p2'\)")
    _refused(tmp_path, LONG.drop(index=5), r"1 prompts lack a row for some of the 2 models \(first: 'p3'\)")
    t = read_logged([tmp_path / "logs.csv"], ReadOptions(drop_incomplete=True))
    assert t.prompt_ids == ("p1", "p2", "p4")


def test_refuses_scores_out_of_range_or_not_numbers(tmp_path: Path) -> None:
    _refused(
        tmp_path,
        LONG.assign(score=LONG["score"] * 100),
        r"scores outside \[0, 1\] \(first: 100.0 for prompt 'p1'",
    )
    _refused(tmp_path, LONG.assign(score=["yes", *list(LONG["score"][1:])]), "1 scores are not numbers")


def test_refuses_a_table_without_cost_or_columns(tmp_path: Path) -> None:
    _refused(tmp_path, LONG.drop(columns="cost_usd"), "the table has no cost")
    _refused(tmp_path, LONG.drop(columns="prompt"), "needs a 'prompt' column")
    _refused(tmp_path, LONG.assign(task=["x", *list(LONG["task"][1:])]), "prompt ids have more than one task")


def test_no_split_column_hashes_a_test_and_a_validation_share(tmp_path: Path) -> None:
    rows = [(f"q{i}", f"prompt {i}", m, 1.0, 0.001) for i in range(500) for m in ("a", "b")]
    frame = pd.DataFrame(rows, columns=["prompt_id", "prompt", "model", "score", "cost_usd"])
    t = read_logged([_csv(tmp_path, frame)], ReadOptions(test_fraction=0.2))
    assert set(t.splits) == {"train", "validation", "test"} and abs(t.splits.count("test") / 500 - 0.2) < 0.05
    assert abs(t.splits.count("validation") / 500 - 0.08) < 0.03  # a tenth of train
    none = read_logged([tmp_path / "logs.csv"], ReadOptions(test_fraction=0.2, validation_fraction=0.0))
    assert set(none.splits) == {"train", "test"}
    assert t.splits == read_logged([tmp_path / "logs.csv"], ReadOptions(test_fraction=0.2)).splits


def test_cli_import_and_its_one_line_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _csv(tmp_path, LONG)
    assert main(["outcomes", "import", str(path), "--out", str(tmp_path / "mine")]) == 0
    assert "imported 4 prompts x 2 models" in capsys.readouterr().out
    assert load_logged(tmp_path / "mine").models == ("big", "small")
    assert main(["outcomes", "import", str(path), "--out", str(tmp_path / "mine")]) == 2
    err = capsys.readouterr()
    text = (err.out + err.err).strip()
    assert text.startswith("error:") and "exists; give --force" in text and "\n" not in text
