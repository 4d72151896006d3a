"""Replay and outcome tables are checked when opened; a strict replay stops at its first missing call;
``outcomes show`` says what a table covers and refuses one whose lines do not add up."""

from __future__ import annotations

import gzip
import json
import shutil
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from puppeteer.backends.cache import CacheStats
from puppeteer.backends.replay import (
    OUTCOMES_FILE,
    RESPONSES_FILE,
    ReplayBackend,
    ReplayMiss,
    ReplayTable,
    TableError,
    read_outcomes,
    read_responses,
)
from puppeteer.cli.app import main
from puppeteer.utils.resources import data_dir
from tests.backends.test_cache import CountingBackend, req

SHIPPED = data_dir("agents") / "local-mix.replay"


@pytest.fixture(autouse=True)
def _replay_mode_restored(monkeypatch: pytest.MonkeyPatch) -> None:
    """``--replay`` sets PUPPETEER_REPLAY for the process: put it back after each test."""
    monkeypatch.setenv("PUPPETEER_REPLAY", "on")


def _lines(path: Path) -> list[str]:
    with gzip.open(path, "rt", encoding="utf-8") as f:
        return f.read().splitlines()


def _write_lines(path: Path, lines: list[str]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with gzip.open(path, "wt", encoding="utf-8") as f:
        f.write("".join(line + "\n" for line in lines))


def _pool_with_table(tmp_path: Path, table: Path) -> Path:
    """``local-mix`` as a YAML file of its own whose replay folder is ``table``."""
    raw = yaml.safe_load((data_dir("agents") / "local-mix.yaml").read_text())
    raw["replay"] = str(table)
    path = tmp_path / "pool.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


def _one_error(capsys: pytest.CaptureFixture[str]) -> str:
    out = capsys.readouterr()
    text = (out.out + out.err).strip()
    assert "Traceback" not in text
    errors = [line for line in text.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, text
    return errors[0]


# --------------------------------------------------------------------------- damaged files


@pytest.mark.parametrize("name", [OUTCOMES_FILE, RESPONSES_FILE])
def test_a_byte_truncated_table_is_refused_naming_its_file(tmp_path: Path, name: str) -> None:
    table = tmp_path / "t"
    table.mkdir()
    data = (SHIPPED / name).read_bytes()
    (table / name).write_bytes(data[: len(data) // 2])
    read = read_outcomes if name == OUTCOMES_FILE else read_responses
    with pytest.raises(TableError, match=rf"{name}: the file is (truncated|damaged)"):
        read(table)


def test_a_file_that_is_not_gzip_is_refused_naming_it(tmp_path: Path) -> None:
    (tmp_path / RESPONSES_FILE).write_text("hello, not gzip\n")
    with pytest.raises(TableError, match=rf"{tmp_path / RESPONSES_FILE}: the file is damaged"):
        read_responses(tmp_path)


def test_duplicate_rows_and_wrong_types_are_refused(tmp_path: Path) -> None:
    rows = _lines(SHIPPED / OUTCOMES_FILE)[:3]
    _write_lines(tmp_path / OUTCOMES_FILE, [*rows, rows[1]])
    with pytest.raises(TableError, match="two rows for"):
        read_outcomes(tmp_path)
    bad = json.loads(rows[0]) | {"prompt_tokens": "578"}
    _write_lines(tmp_path / OUTCOMES_FILE, [json.dumps(bad)])
    with pytest.raises(TableError, match=r":1: prompt_tokens='578' is not a int"):
        read_outcomes(tmp_path)
    bad = json.loads(rows[0]) | {"correct": 1}
    _write_lines(tmp_path / OUTCOMES_FILE, [json.dumps(bad)])
    with pytest.raises(TableError, match="correct=1 is not a bool"):
        read_outcomes(tmp_path)
    _write_lines(tmp_path / OUTCOMES_FILE, ["[1, 2]"])
    with pytest.raises(TableError, match="not a JSON object"):
        read_outcomes(tmp_path)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.binary(max_size=400), cut=st.integers(min_value=0, max_value=4000))
def test_any_bytes_as_a_table_load_or_fail_with_a_table_error(tmp_path: Path, data: bytes, cut: int) -> None:
    """Random bytes, and random cuts of a real gzipped table: rows or one TableError, nothing else."""
    for blob in (data, gzip.compress(data), (SHIPPED / RESPONSES_FILE).read_bytes()[:cut]):
        (tmp_path / RESPONSES_FILE).write_bytes(blob)
        try:
            read_responses(tmp_path)
        except TableError as e:
            assert "\n" not in str(e) and RESPONSES_FILE in str(e)


def test_eval_on_a_damaged_table_prints_one_line_naming_the_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    table = tmp_path / "t"
    shutil.copytree(SHIPPED, table)
    data = (table / RESPONSES_FILE).read_bytes()
    (table / RESPONSES_FILE).write_bytes(data[:1000])
    pool = _pool_with_table(tmp_path, table)
    args = [
        "eval",
        "--pool",
        str(pool),
        "--suite",
        "mix-local",
        "--policy",
        "single:qwen0.5b-direct",
        "--n",
        "2",
    ]
    assert main([*args, "--out", str(tmp_path / "ev"), "--quiet", "--no-cache"]) == 2
    assert str(table / RESPONSES_FILE) in _one_error(capsys)
    assert not (tmp_path / "ev" / "results.json").exists()


# --------------------------------------------------------------------------- strict replay


def test_a_strict_miss_counts_as_a_miss_in_the_summary() -> None:
    class Stats(CountingBackend):
        stats = CacheStats(hits=4, misses=0)

    replay = ReplayBackend(Stats(), ReplayTable(Path("t"), {}), strict=True)
    with pytest.raises(ReplayMiss):
        replay.complete(req("a"))
    assert (replay.stats.hits, replay.stats.misses) == (4, 1)


def test_strict_replay_stops_at_the_first_missing_call_and_says_not_completed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Half of a table's responses gone: the run stops with one line at the first miss instead of
    recording every missing call as a wrong answer and reporting the run as completed."""
    table = tmp_path / "t"
    table.mkdir()
    shutil.copy(SHIPPED / OUTCOMES_FILE, table / OUTCOMES_FILE)
    rows = _lines(SHIPPED / RESPONSES_FILE)
    _write_lines(table / RESPONSES_FILE, rows[::2])
    pool = _pool_with_table(tmp_path, table)
    out = tmp_path / "ev"
    args = [
        "eval",
        "--pool",
        str(pool),
        "--suite",
        "mix-local",
        "--policy",
        "single:qwen1.5b-cot",
        "--n",
        "30",
    ]
    assert (
        main([*args, "--out", str(out), "--replay", "strict", "--quiet", "--no-cache", "--concurrency", "1"])
        == 2
    )
    line = _one_error(capsys)
    assert "does not hold" in line and "strict replay" in line and str(table) in line
    result = json.loads((out / "results.json").read_text())
    assert result["completed"] is False
    assert result["cache_misses"] >= 1  # the miss is counted, not hidden behind the cache's zero
    lines = (out / "trajectories.jsonl").read_text().splitlines()
    assert len(lines) < 30 and result["n_errors"] == 0
    assert all(json.loads(x).get("error") is None for x in lines)  # no miss recorded as a wrong answer


@pytest.mark.parametrize("content", [None, []])
def test_strict_replay_refuses_a_missing_or_empty_table_before_any_item(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], content: list[str] | None
) -> None:
    table = tmp_path / "t"
    table.mkdir()
    if content is not None:
        _write_lines(table / RESPONSES_FILE, content)
    pool = _pool_with_table(tmp_path, table)
    out = tmp_path / "ev"
    args = [
        "eval",
        "--pool",
        str(pool),
        "--suite",
        "mix-local",
        "--policy",
        "single:qwen1.5b-cot",
        "--n",
        "5",
    ]
    assert main([*args, "--out", str(out), "--replay", "strict", "--quiet", "--no-cache"]) == 2
    assert "holds no responses" in _one_error(capsys)
    assert not (out / "results.json").exists() and not (out / "trajectories.jsonl").exists()


# --------------------------------------------------------------------------- outcomes show


def test_outcomes_show_states_coverage_and_refuses_a_table_that_does_not_add_up(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    table = tmp_path / "t"
    table.mkdir()
    rows = _lines(SHIPPED / OUTCOMES_FILE)
    _write_lines(table / OUTCOMES_FILE, rows)
    show = ["outcomes", "show", "--pool", "local-mix", "--table", str(table)]
    assert main(show) == 0
    printed = capsys.readouterr().out
    n_test = len({json.loads(r)["task_id"] for r in rows if json.loads(r)["split"] == "test"})
    assert printed.startswith(
        f"Coverage: split test: {n_test} items (of {n_test} in mix-local/test); per agent: "
    )
    assert f"qwen0.5b-direct {n_test}," in printed and f"qwen1.5b-cot {n_test}," in printed
    # lines of one agent lost: refused, naming the agent and its count
    kept = [r for i, r in enumerate(rows) if not (json.loads(r)["agent"] == "qwen1.5b-cot" and i % 3 == 0)]
    _write_lines(table / OUTCOMES_FILE, kept)
    assert main(show) == 2
    line = _one_error(capsys)
    assert "does not add up" in line and "qwen1.5b-cot has" in line and f"of its {n_test} items" in line
    assert main([*show, "--partial"]) == 0
    assert "qwen1.5b-cot " in capsys.readouterr().out
    (table / OUTCOMES_FILE).unlink()
    assert main(show) == 2
    assert "no outcome table" in _one_error(capsys)
