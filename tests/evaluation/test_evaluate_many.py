"""Several evaluations at once (puppeteer.evaluation.many): same results as one after another, calls
of different runs in flight together, and the baselines table's --jobs."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
from _eval_lines import comparable_lines

from puppeteer.agents.pool import Pool, load_pool
from puppeteer.backends.sim import SimBackend
from puppeteer.envs.build import sim_answer_key
from puppeteer.evaluation.evaluate import evaluate_policy
from puppeteer.evaluation.many import EvalRun, evaluate_many
from puppeteer.evaluation.settings import EvalSettings
from puppeteer.tasks import load_suite
from puppeteer.types import Completion, CompletionRequest, Task
from tests.experiment_modules import experiment_module

baselines_table = experiment_module("baselines-local", "baselines_table")  # a table of every baseline

SPECS = ("single:gpt5-cot", "single:gemma3-27b-cot", "vote:3", "moa")


@pytest.fixture(scope="module")
def pool() -> Pool:
    return load_pool("sim-paper")


@pytest.fixture(scope="module")
def tasks() -> tuple[Task, ...]:
    return tuple(load_suite("arith", "test", n=12))


def test_runs_at_once_give_what_they_give_one_after_another(
    tmp_path: Path, pool: Pool, tasks: tuple[Task, ...]
) -> None:
    def run(spec: str, folder: str) -> EvalRun:
        return EvalRun(
            spec,
            EvalSettings(pool=pool, suite="arith", tasks=tasks, out_dir=tmp_path / folder, progress=False),
        )

    finished: list[int] = []
    many = evaluate_many(
        [run(s, f"many/{i}") for i, s in enumerate(SPECS)],
        jobs=4,
        on_done=lambda i, _: finished.append(i),
        progress=False,
    )
    assert sorted(finished) == [0, 1, 2, 3]
    for i, (spec, result) in enumerate(zip(SPECS, many, strict=True)):
        alone = evaluate_policy(
            spec, pool, "arith", tasks=tasks, out_dir=tmp_path / f"one/{i}", progress=False
        )
        assert result.policy == spec  # in the order of the runs, whatever order they finished in
        assert (result.correct, result.mean_calls, result.mean_reward) == (
            alone.correct,
            alone.mean_calls,
            alone.mean_reward,
        )
        assert comparable_lines(tmp_path / f"many/{i}/trajectories.jsonl") == comparable_lines(
            tmp_path / f"one/{i}/trajectories.jsonl"
        )


class OverlapBackend:
    """The simulator, except that a call waits (up to ``patience`` s) until a call for another model is
    in flight too; ``overlapped`` is set once two models' calls were in flight at the same moment."""

    name = "overlap"

    def __init__(self, inner: SimBackend, patience: float) -> None:
        self.inner, self.patience = inner, patience
        self.in_flight: dict[str, int] = {}
        self.lock = threading.Lock()
        self.overlapped = threading.Event()

    def complete(self, request: CompletionRequest) -> Completion:
        with self.lock:
            self.in_flight[request.model.name] = self.in_flight.get(request.model.name, 0) + 1
            if sum(n > 0 for n in self.in_flight.values()) > 1:
                self.overlapped.set()
        try:
            self.overlapped.wait(self.patience)
            return self.inner.complete(request)
        finally:
            with self.lock:
                self.in_flight[request.model.name] -= 1

    async def acomplete(self, request: CompletionRequest) -> Completion:
        return self.complete(request)


@pytest.mark.parametrize(("jobs", "together"), [(1, False), (2, True)])
def test_calls_of_runs_at_once_are_in_flight_together(
    pool: Pool, tasks: tuple[Task, ...], jobs: int, together: bool
) -> None:
    options = {**dict(pool.backend_options["sim"]), "answer_key": sim_answer_key(tasks)}
    backend = OverlapBackend(SimBackend(**options), patience=0.1)
    runs = [
        EvalRun(
            spec,
            EvalSettings(
                pool=pool, suite="arith", tasks=tasks[:3], backend=backend, concurrency=1, progress=False
            ),
        )
        for spec in ("single:gpt5-cot", "single:gemma3-27b-cot")  # two models, one call per item each
    ]
    results = evaluate_many(runs, jobs=jobs, progress=False)
    assert [r.n for r in results] == [3, 3]
    assert backend.overlapped.is_set() is together


def test_jobs_below_one_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="jobs must be at least 1"):
        evaluate_many([], jobs=0)
    args = ["--pool", "sim-paper", "--suites", "arith", "--n", "2", "--quiet", "--no-cache", "--no-plot"]
    with pytest.raises(SystemExit, match="--jobs must be at least 1"):
        baselines_table.main([*args, "--jobs", "0", "--out", str(tmp_path / "t.md")])


def _table_rows(text: str) -> list[list[str]]:
    """The result rows' cells, without the per-run wall time."""
    header = next(line for line in text.splitlines() if line.startswith("| policy | suite"))
    wall = [c.strip() for c in header.split("|")].index("wall s")
    rows = [[c.strip() for c in line.split("|")] for line in text.splitlines() if line.startswith("| `")]
    return [r[:wall] + r[wall + 1 :] for r in rows]


def test_the_baselines_table_with_jobs_equals_the_one_after_another_table(tmp_path: Path) -> None:
    tables = {}
    for jobs in (1, 3):
        out = tmp_path / f"table-{jobs}.md"
        args = ["--pool", "sim-paper", "--suites", "arith", "mmlu", "--n", "15", "--quiet", "--no-cache"]
        args += ["--no-plot", "--specs", *SPECS[:3], "--jobs", str(jobs)]
        args += ["--runs-dir", str(tmp_path / f"runs-{jobs}"), "--out", str(out)]
        assert baselines_table.main(args) == 0
        tables[jobs] = out.read_text()
    assert "Partial" not in tables[3]
    rows = _table_rows(tables[3])
    assert len(rows) >= 6  # 3 baselines x 2 suites, in the order of the specs
    assert rows == _table_rows(tables[1])
