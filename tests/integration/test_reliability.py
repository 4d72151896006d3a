"""Regression tests for issue 10: nothing a user or a model sends can hang, crash, execute or leak."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import math
import os
import sqlite3
from pathlib import Path

import pytest
from _faults import FlakyBackend
from _procs import live_members

from puppeteer.agents.pool import PoolError
from puppeteer.backends.cache import CacheError
from puppeteer.cli import main
from puppeteer.envs import workflow
from puppeteer.envs.env import ConductorEnv
from puppeteer.envs.workflow import MAX_TEXT_CHARS, WorkflowError, parse_workflow
from puppeteer.errors import UserError
from puppeteer.evaluation.evaluate import ResultExists, evaluate_policy
from puppeteer.tools.sandbox import SandboxLimits, run_python
from puppeteer.utils.redaction import REDACTED, redact, split_secret_overrides

VALID = 'model_id = [0, 1]\nsubtasks = ["solve", "check"]\naccess_list = [[], "all"]\n'


class CountingStr(str):
    """A string that counts the characters read from it one at a time (the scanner's work)."""

    reads = 0

    def __getitem__(self, key):  # type: ignore[override]
        CountingStr.reads += 1 if isinstance(key, int) else 0
        return str.__getitem__(self, key)


def _work(text: str) -> int:
    CountingStr.reads = 0
    with contextlib.suppress(WorkflowError):
        parse_workflow(CountingStr(text), n_agents=3)
    return CountingStr.reads


# ---------------------------------------------------------------- 1: linear parsing, bounded steps
@pytest.mark.parametrize("unit", ["model_id=[", 'model_id=["', "subtasks = ['''", "access_list=[[["])
def test_parsing_reads_each_character_a_bounded_number_of_times(unit: str) -> None:
    small, large = unit * (2_000 // len(unit)), unit * (20_000 // len(unit))
    assert _work(large) <= 6 * len(large)  # before the fix: ~10^7 reads for 20,000 characters
    assert _work(large) <= 12 * max(_work(small), 1) + 100  # linear growth, not quadratic


def test_a_valid_workflow_followed_by_many_openers_still_parses_in_linear_work() -> None:
    text = VALID + "model_id=[" * 19_000  # just inside MAX_TEXT_CHARS (the env keeps the last 200,000)
    assert parse_workflow(text, n_agents=3).model_id == (0, 1)
    assert _work(text) <= 6 * len(text)


def test_the_linear_scanner_matches_the_plain_one_on_awkward_text() -> None:
    text = 'model_id = [0, 1]  # model_id = [\nsubtasks = ["a ] \\" [", \'b\']\naccess_list = [[], []]\n'
    assert parse_workflow(text, n_agents=3).subtasks == ('a ] " [', "b")
    assert workflow._list_span("[1, '[', \"]\", [2]] tail", 0) == len("[1, '[', \"]\", [2]]")
    assert workflow._list_span("[1, 2", 0) is None


def test_a_hostile_completion_at_the_action_space_limit_is_one_bounded_step() -> None:
    env = ConductorEnv(mode="workflow", pool="sim-paper", suite="arith", n_tasks=2)
    text = VALID + "model_id=[" * ((MAX_TEXT_CHARS - len(VALID)) // 10)
    assert env.action_space.contains(text)
    env.reset(seed=0)
    _, reward, terminated, _, info = env.step(text)
    assert terminated and info["parse_error"] is None and reward in (0.5, 1.0)


# ---------------------------------------------------------------- 2: lone surrogates
class StrictUtf8Backend:
    """Encodes every message as UTF-8 like llama.cpp's chat formatting and HTTP clients do."""

    name = "strict"

    def __init__(self, inner) -> None:
        self.inner = inner

    def complete(self, request):
        for m in request.messages:
            m.content.encode("utf-8")
        return self.inner.complete(request)

    async def acomplete(self, request):
        for m in request.messages:
            m.content.encode("utf-8")
        return await self.inner.acomplete(request)


def test_a_lone_surrogate_in_a_subtask_reaches_no_backend() -> None:
    base = ConductorEnv(mode="workflow", pool="sim-paper", suite="arith", n_tasks=2)
    env = ConductorEnv(
        mode="workflow",
        pool="sim-paper",
        suite="arith",
        n_tasks=2,
        backend=StrictUtf8Backend(base.executor.backend),
    )
    env.reset(seed=0)
    text = (
        'model_id = [0, 1]\nsubtasks = ["solve \udcff it", "check \ud83d\ude00"]\naccess_list = [[], "all"]'
    )
    *_, info = env.step(text)
    traj = info["trajectory"]
    assert info["parse_error"] is None and traj.steps[0].subtask == "solve \ufffd it"
    assert traj.steps[1].subtask == "check \U0001f600"  # a valid pair is joined, not replaced


# ---------------------------------------------------------------- 6: corrupt response cache
def _good_result(out: Path) -> dict:
    evaluate_policy("single:gpt5-cot", "sim-paper", "arith", n=5, out_dir=out, progress=False)
    return json.loads((out / "results.json").read_text())


def _truncated_db(path: Path) -> None:
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE t (x TEXT)")
    conn.executemany("INSERT INTO t VALUES (?)", [("x" * 500,)] * 400)
    conn.commit()
    conn.close()
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 3])


@pytest.mark.parametrize("kind", ["random", "truncated", "directory"])
def test_an_unusable_cache_stops_the_run_at_start_and_keeps_earlier_results(
    tmp_path: Path, kind: str
) -> None:
    out = tmp_path / "out"
    good = _good_result(out)
    cache = tmp_path / "cache.sqlite"
    if kind == "random":
        cache.write_bytes(os.urandom(8192))
    elif kind == "truncated":
        _truncated_db(cache)
    else:
        cache.mkdir()
    with pytest.raises(CacheError, match="unusable"):
        evaluate_policy(
            "single:gpt5-cot",
            "sim-paper",
            "arith",
            n=5,
            out_dir=out,
            cache=cache,
            progress=False,
            overwrite=True,
        )
    assert json.loads((out / "results.json").read_text()) == good


def test_a_finished_result_is_never_overwritten_without_overwrite(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "out"
    good = _good_result(out)
    with pytest.raises(ResultExists, match="--overwrite"):
        evaluate_policy("random", "sim-paper", "arith", n=5, out_dir=out, progress=False)
    assert json.loads((out / "results.json").read_text()) == good
    argv = [
        "eval",
        "--pool",
        "sim-paper",
        "--suite",
        "arith",
        "--policy",
        "random",
        "--n",
        "5",
        "--quiet",
        "--out",
        str(out),
    ]
    assert main(argv) == 2
    assert "--overwrite" in capsys.readouterr().out
    assert main([*argv, "--overwrite"]) == 0
    assert json.loads((out / "results.json").read_text())["policy"] == "random"


# ---------------------------------------------------------------- 7: user errors are one line
def _one_line_error(capsys: pytest.CaptureFixture[str], fragment: str) -> None:
    captured = capsys.readouterr()
    text = captured.out + captured.err
    errors = [line for line in text.splitlines() if line.startswith("error:")]
    assert "Traceback" not in text and len(errors) == 1, text
    assert fragment in errors[0], text


def test_a_corrupt_pool_yaml_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    for body in ("models: [unclosed\n", "- just\n- a list\n", "models: {}\nagents:\n  - 3\n"):
        bad = tmp_path / "bad.yaml"
        bad.write_text(body)
        assert main(["pool", "show", str(bad)]) == 2
        _one_line_error(capsys, "bad.yaml")
        assert bad.read_text() == body


def test_run_with_an_unknown_agent_id_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", "--pool", "sim-paper", "--suite", "arith", "--chain", "99"]) == 2
    _one_line_error(capsys, "99")


def test_eval_out_pointing_at_a_file_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    target = tmp_path / "results.txt"
    target.write_text("keep me")
    assert (
        main(
            [
                "eval",
                "--pool",
                "sim-paper",
                "--suite",
                "arith",
                "--policy",
                "random",
                "--n",
                "3",
                "--quiet",
                "--out",
                str(target),
            ]
        )
        == 2
    )
    _one_line_error(capsys, "is a file")
    assert target.read_text() == "keep me"


@pytest.mark.parametrize(
    ("override", "fragment"),
    [
        ("lam=abc", "lam"),
        ("lam=-1", "lam"),
        ("gamma=5", "gamma"),
        ("lam=nan", "lam"),
        ("trainer.lr=abc", "trainer.lr"),
        ("no_such_key=1", "no_such_key"),
    ],
)
def test_bad_train_overrides_are_one_line_and_write_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], override: str, fragment: str
) -> None:
    out = tmp_path / "run"
    assert (
        main(
            [
                "train",
                override,
                "trainer.episodes=16",
                "trainer.batch_episodes=16",
                "policy.encoder=hashing",
                "wandb.enabled=false",
                f"out={out}",
                f"hydra.run.dir={tmp_path / 'hydra'}",
            ]
        )
        == 2
    )
    _one_line_error(capsys, fragment)
    assert not out.exists() and not (tmp_path / "hydra").exists()


def test_a_corrupt_checkpoint_in_train_is_one_line_and_kept(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "run"
    out.mkdir()
    (out / "checkpoint.pt").write_bytes(b"PK\x03\x04 not really a zip")
    assert (
        main(
            [
                "train",
                "trainer.episodes=32",
                "trainer.batch_episodes=16",
                "policy.encoder=hashing",
                "wandb.enabled=false",
                f"out={out}",
                f"hydra.run.dir={tmp_path / 'hydra'}",
            ]
        )
        == 2
    )
    _one_line_error(capsys, "corrupt or truncated")
    assert (out / "checkpoint.pt").read_bytes() == b"PK\x03\x04 not really a zip"


# ---------------------------------------------------------------- 8: secrets never written
SECRET = "sk-test-0123456789abcdefABCDEF"


def test_a_key_given_as_an_override_is_written_nowhere(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    out, hydra_dir = tmp_path / "run", tmp_path / "hydra"
    assert (
        main(
            [
                "train",
                f"+openai_api_key={SECRET}",
                "trainer.episodes=32",
                "trainer.batch_episodes=16",
                "policy.encoder=hashing",
                "suite.n_eval=4",
                "suite.n_val=4",
                "wandb.enabled=true",
                "wandb.mode=offline",
                f"out={out}",
                f"hydra.run.dir={hydra_dir}",
            ]
        )
        == 0
    )
    assert os.environ["OPENAI_API_KEY"] == SECRET  # the supported place for keys
    files = [p for p in tmp_path.rglob("*") if p.is_file()]
    assert any(p.name == "config.json" for p in files) and any(p.parent.name == ".hydra" for p in files)
    assert any("wandb" in p.parts for p in files)
    leaked = [p for p in files if SECRET.encode() in p.read_bytes()]
    assert leaked == []


def test_redaction_by_name_and_by_value() -> None:
    cfg = {
        "hf_token": "abc",
        "max_tokens": 512,
        "nested": {"api_key": "x", "note": f"use {SECRET} here"},
        "list": [SECRET],
        "monkey": "banana",
    }
    red = redact(cfg)
    assert red["hf_token"] == REDACTED and red["max_tokens"] == 512 and red["monkey"] == "banana"
    assert red["nested"]["api_key"] == REDACTED and SECRET not in json.dumps(red)
    split = split_secret_overrides(["lam=0.2", f"+openai_api_key={SECRET}", f"++x.hf_token=hf_{'a' * 30}"])
    assert split.kept == ("lam=0.2",)
    assert dict(split.secrets) == {"OPENAI_API_KEY": SECRET, "HF_TOKEN": "hf_" + "a" * 30}


# ---------------------------------------------------------------- 9: validation gaps
@pytest.mark.parametrize(
    ("kwargs", "fragment"),
    [
        ({"lam": -1}, "lam"),
        ({"lam": math.nan}, "lam"),
        ({"lam": math.inf}, "lam"),
        ({"gamma": 5}, "gamma"),
        ({"gamma": 0}, "gamma"),
        ({"phi": 0}, "phi"),
        ({"workflow_lam": -0.5}, "workflow_lam"),
        ({"unavailable": [99]}, "99"),
        ({"unavailable": [-1]}, "-1"),
    ],
)
def test_bad_env_settings_are_rejected_with_their_name(kwargs: dict, fragment: str) -> None:
    with pytest.raises(ValueError, match=fragment):
        ConductorEnv(pool="sim-paper", suite="arith", n_tasks=2, **kwargs)


def test_unavailable_out_of_range_is_a_pool_error() -> None:
    with pytest.raises(PoolError, match="not an agent id"):
        ConductorEnv(pool="sim-paper", suite="arith", n_tasks=2, unavailable=[99])


def test_access_list_entry_written_as_a_list_holding_all_is_accepted() -> None:
    wf = parse_workflow('model_id = [0, 1]\nsubtasks = ["a", "b"]\naccess_list = [[], ["all"]]', n_agents=3)
    assert wf.access_list == ((), "all")


# ---------------------------------------------------------------- 3 (evaluation side): failed calls
def test_evaluation_and_training_agree_that_a_failed_call_is_a_wrong_answer() -> None:
    env = ConductorEnv(pool="sim-paper", suite="arith", n_tasks=2, max_steps=2)
    flaky = ConductorEnv(
        pool="sim-paper",
        suite="arith",
        n_tasks=2,
        max_steps=2,
        backend=FlakyBackend(env.executor.backend, 1.0),
    )
    flaky.reset(seed=0)
    with pytest.raises(ConnectionError):
        flaky.step(0)
    _, reward, terminated, _, info = flaky.abort("ConnectionError: down")
    assert terminated and not info["correct"] and info["error"] == "ConnectionError: down"
    assert reward == pytest.approx(env._reward.final_reward(False, 0.0, 1))


# ---------------------------------------------------------------- 10: sandbox process lifetime
@pytest.mark.parametrize("namespaces", [True, False])
def test_no_process_of_a_fork_bomb_outlives_run_python(namespaces: bool) -> None:
    limits = SandboxLimits(timeout_s=1.0, cpu_s=2, memory_mb=256, audit_hook=False, namespaces=namespaces)
    bomb = "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass"
    result = run_python(bomb, limits=limits)
    assert result.status in ("timeout", "killed")
    assert live_members(result.pid) == []  # checked at once: not "soon after"
    sleepers = "import os, time\nfor _ in range(8):\n    if os.fork() == 0:\n        time.sleep(60)\n"
    sleepers += "print('bye')"

    result = run_python(sleepers, limits=dataclasses.replace(limits, timeout_s=3.0))
    assert result.stdout.startswith("bye") and live_members(result.pid) == []


# ---------------------------------------------------------------- full disk during an evaluation
def test_a_full_disk_during_evaluation_keeps_whole_lines_and_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from _faults import DiskFullFile

    out = tmp_path / "out"
    real_open = Path.open

    def full_open(self: Path, mode: str = "r", *args, **kwargs):
        if self.name == "trajectories.jsonl" and "w" in mode:
            return DiskFullFile(real_open(self, "wb"), budget=6_000)
        return real_open(self, mode, *args, **kwargs)

    monkeypatch.setattr(Path, "open", full_open)
    with pytest.raises(UserError, match="No space left on device"):
        evaluate_policy("single:gpt5-cot", "sim-paper", "arith", n=30, out_dir=out, progress=False)
    monkeypatch.undo()
    lines = (out / "trajectories.jsonl").read_text().splitlines()
    assert 0 < len(lines) < 30 and all(json.loads(line)["task_id"] for line in lines)
    result = json.loads((out / "results.json").read_text())
    assert result["completed"] is False and result["correct"] == sum(json.loads(x)["correct"] for x in lines)


def test_a_question_with_a_lone_surrogate_reaches_no_backend_raw() -> None:
    from puppeteer.types import Task

    base = ConductorEnv(mode="step", pool="sim-paper", suite="arith", n_tasks=2)
    task = dataclasses.replace(base.tasks[0], question=base.tasks[0].question + " \udcff")
    assert isinstance(task, Task)
    env = ConductorEnv(
        mode="step", pool="sim-paper", tasks=[task], backend=StrictUtf8Backend(base.executor.backend)
    )
    env.reset(seed=0, options={"task": task})
    *_, info = env.step(0)
    assert env.task.question.endswith("\ufffd") and info["step"].completion.text
