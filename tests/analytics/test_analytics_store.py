from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from analytics_fixtures import trajectory, write_eval_run, write_train_run

from puppeteer.analytics import TrajectoryStore, load
from puppeteer.envs.trajectories import trajectory_to_dict


def test_load_returns_episodes_and_steps_and_skips_a_torn_line(tmp_path: Path) -> None:
    trajs = [trajectory("t0", ["A", "B"], True), trajectory("t1", ["A"], False), trajectory("t2", [], False)]
    run = write_eval_run(tmp_path / "ev", trajs, policy="vote:3", torn_tail=True)
    eps = load(run)
    assert list(eps["task_id"]) == ["t0", "t1", "t2"]
    assert list(eps["correct"]) == [True, False, False]
    assert list(eps["calls"]) == [2, 1, 0]
    assert list(eps["tokens"]) == [300, 150, 0]
    assert (
        set(eps["policy"]) == {"vote:3"} and set(eps["kind"]) == {"eval"} and set(eps["backend"]) == {"sim"}
    )
    steps = load(run, level="steps")
    assert list(steps["agent_name"]) == ["A", "B", "A"]
    assert list(steps["access"]) == [[], [0], []]


def test_training_runs_carry_the_update_index(tmp_path: Path) -> None:
    trajs = [trajectory(f"t{i}", ["A"], i % 2 == 0) for i in range(6)]
    run = write_train_run(tmp_path / "tr", trajs, batch_episodes=2)
    eps = load(run)
    assert list(eps["update_index"]) == [1, 1, 2, 2, 3, 3]
    assert set(eps["kind"]) == {"train"} and set(eps["split"]) == {"train"}


def test_load_many_runs_from_a_parent_folder(tmp_path: Path) -> None:
    write_eval_run(tmp_path / "runs" / "a", [trajectory("t0", ["A"], True)], policy="a")
    write_eval_run(tmp_path / "runs" / "b", [trajectory("t0", ["B"], False)], policy="b")
    eps = load(tmp_path / "runs")
    assert sorted(eps["policy"]) == ["a", "b"]
    with pytest.raises(FileNotFoundError):
        load(tmp_path / "missing")


def test_ingest_is_incremental_and_exactly_once(tmp_path: Path) -> None:
    run = write_eval_run(tmp_path / "ev", [trajectory("t0", ["A"], True)], torn_tail=True)
    db = tmp_path / "store.sqlite"
    with TrajectoryStore(db) as st:
        assert st.ingest(run) == 1
        assert st.ingest(run) == 0
    # the writer finishes its torn line and appends one more episode
    text = (run / "trajectories.jsonl").read_text()
    lines = text[: text.rindex("\n") + 1]
    more = [json.dumps(trajectory_to_dict(trajectory(t, ["B"], False))) for t in ("t1", "t2")]
    (run / "trajectories.jsonl").write_text(lines + "\n".join(more) + "\n")
    with TrajectoryStore(db) as st:
        assert st.ingest(run) == 2
    assert list(load(store=db)["task_id"]) == ["t0", "t1", "t2"]


WRITER = textwrap.dedent("""
    import sys, time, json
    from pathlib import Path
    sys.path.insert(0, {tests!r})
    from analytics_fixtures import trajectory
    from puppeteer.analytics.store import TrajectoryStore
    from puppeteer.envs.trajectories import trajectory_to_dict

    class SlowStore(TrajectoryStore):
        def _insert(self, episode_row, step_rows):
            self.db.execute("INSERT INTO episodes (run_id, episode, task_id) VALUES (?, ?, ?)",
                            episode_row[:3])
            if episode_row[1] == {stall}:
                print("IN_FLIGHT", flush=True)
                time.sleep(60)  # killed here: the episode row is written, its steps are not, no commit
            self.db.execute("DELETE FROM episodes WHERE run_id=? AND episode=?", episode_row[:2])
            super()._insert(episode_row, step_rows)

    st = SlowStore(sys.argv[1])
    for k in range(1000):
        t = trajectory(f"t{{k}}", ["A", "B", "A"], k % 2 == 0)
        st.add_episode("live", k, trajectory_to_dict(t))
        print("COMMITTED", k, flush=True)
""")


def test_a_killed_writer_loses_only_the_episode_in_flight(tmp_path: Path) -> None:
    db = tmp_path / "store.sqlite"
    script = tmp_path / "writer.py"
    script.write_text(WRITER.format(tests=str(Path(__file__).parent), stall=7))
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(Path(__file__).parents[2]), os.environ.get("PYTHONPATH", "")]),
    }
    proc = subprocess.Popen(
        [sys.executable, str(script), str(db)], stdout=subprocess.PIPE, text=True, env=env
    )
    committed = []
    assert proc.stdout is not None
    for line in proc.stdout:
        if line.startswith("COMMITTED"):
            committed.append(int(line.split()[1]))
        if line.startswith("IN_FLIGHT"):
            break
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    assert committed == list(range(7))
    con = sqlite3.connect(db)
    assert con.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    con.close()
    with TrajectoryStore(db) as st:
        eps = st.episodes()
        steps = st.steps()
    assert list(eps["episode"]) == list(range(7))  # episode 7 (in flight) is gone, nothing earlier lost
    assert (steps.groupby("episode").size() == 3).all() and len(steps) == 21
    assert list(eps["correct"]) == [k % 2 == 0 for k in range(7)]


@pytest.mark.parametrize("bad", [{"steps": "oops"}, {"steps": [1, 2]}, [1, 2], "text"])
def test_a_malformed_record_is_named_by_file_and_record(tmp_path: Path, bad: object) -> None:
    """Issue 33: a record whose steps is not a list crashed `ab` and `graph` with an AttributeError
    naming neither the file nor the line."""
    from puppeteer.analytics.store import MalformedRecord
    from puppeteer.envs.trajectories import MalformedTrajectory, read_trajectories

    run = write_eval_run(tmp_path / "ev", [trajectory("t0", ["A"], True), trajectory("t1", ["A"], False)])
    path = run / "trajectories.jsonl"
    lines = path.read_text().splitlines()
    record = {**json.loads(lines[1]), **bad} if isinstance(bad, dict) else bad
    path.write_text("\n".join([lines[0], json.dumps(record)]) + "\n")
    with pytest.raises(MalformedRecord, match=r"trajectories.jsonl: episode record 2"):
        load(run)
    with pytest.raises(MalformedTrajectory, match=r"trajectories.jsonl: line 2"):
        list(read_trajectories(path))
