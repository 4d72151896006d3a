"""Run directories: one writer at a time, another command's results never replaced, nothing written by a
refused run, and a failed checkpoint write that leaves the last good checkpoint as it was."""

from __future__ import annotations

import os
import resource
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

from puppeteer.cli.app import main
from puppeteer.utils.rundir import LOCK_FILE, RunDirBusy, claim
from puppeteer.utils.safeload import CheckpointError, atomic_torch_save

ROOT = Path(__file__).resolve().parents[2]
FAST = [
    "trainer.batch_episodes=16",
    "trainer.first_step=sample",  # groups of trainer.group_size: the episodes asked for are the episodes run
    "policy.encoder=hashing",
    "policy.hidden=16",
    "suite.n_train=24",
    "suite.n_eval=6",
    "suite.n_val=6",
    "wandb.enabled=false",
    "progress=false",
]


def _train(out: Path, tmp_path: Path, *extra: str, episodes: int = 32) -> int:
    return main(
        [
            "train",
            f"trainer.episodes={episodes}",
            *FAST,
            *extra,
            f"out={out}",
            f"hydra.run.dir={tmp_path / 'h'}",
        ]
    )


def _snapshot(d: Path) -> dict[str, bytes]:
    """Every file under ``d`` (the lock file aside: it holds only the last holder's process id)."""
    return {
        str(p.relative_to(d)): p.read_bytes()
        for p in sorted(d.rglob("*"))
        if p.is_file() and p.name != LOCK_FILE
    }


def _error_line(capsys: pytest.CaptureFixture[str]) -> str:
    out = capsys.readouterr()
    text = (out.out + out.err).strip()
    lines = [line for line in text.splitlines() if line.strip()]
    assert "Traceback" not in text
    errors = [line for line in lines if line.startswith("error:")]
    assert len(errors) == 1, text
    return errors[0]


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1", "WANDB_MODE": "offline"}


# --------------------------------------------------------------------------- one writer at a time


def test_a_second_training_on_a_held_directory_exits_before_writing_anything(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "run"
    with claim(out):  # another run holds it (flock is per open file: this process counts as another)
        assert _train(out, tmp_path) == 2
        assert sorted(p.name for p in out.iterdir()) == [LOCK_FILE]  # no config.json, no trajectories
    line = _error_line(capsys)
    assert str(out) in line and "in use by another run" in line
    assert _train(out, tmp_path) == 0  # released: the same command runs


def test_a_killed_holder_releases_the_lock_and_the_run_resumes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "run"
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time; from puppeteer.utils.rundir import claim\n"
            f"with claim({str(out)!r}):\n    print('held', flush=True); time.sleep(600)",
        ],
        stdout=subprocess.PIPE,
        text=True,
        env=_env(),
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        with pytest.raises(RunDirBusy, match=rf"process {holder.pid}\b"), claim(out):
            pass
        assert _train(out, tmp_path) == 2
        assert "in use by another run" in _error_line(capsys)
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait()
    assert _train(out, tmp_path) == 0  # the OS released the dead holder's lock
    assert (out / "results.json").exists()


@pytest.mark.integration
def test_two_trainings_started_at_once_one_runs_and_the_files_equal_a_run_alone(tmp_path: Path) -> None:
    """Two processes on one ``out`` started together (seeds 0 and 1): exactly one trains, the other exits
    non-zero having written nothing (refused by the lock, or by the finished run's checkpoint if it came
    late), and the survivor's files are byte for byte those of a run alone with its seed."""
    episodes = 512
    out = tmp_path / "shared"

    def start(seed: int) -> subprocess.Popen[str]:
        cmd = [
            sys.executable,
            "-m",
            "puppeteer",
            "train",
            f"trainer.episodes={episodes}",
            *FAST,
            f"seed={seed}",
        ]
        cmd += [f"out={out}", f"hydra.run.dir={tmp_path / f'h{seed}'}"]
        return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=_env())

    runs = [start(0), start(1)]
    texts = [r.communicate(timeout=600)[0] for r in runs]
    codes = [r.returncode for r in runs]
    assert sorted(codes) == [0, 2], texts
    winner, loser = codes.index(0), codes.index(2)
    refusal = [ln for ln in texts[loser].splitlines() if ln.startswith("error:")]
    assert len(refusal) == 1 and "Traceback" not in texts[loser], texts[loser]
    assert "in use by another run" in refusal[0] or "checkpoint of another run" in refusal[0]
    alone = tmp_path / "alone"
    assert _train(alone, tmp_path, f"seed={winner}", episodes=episodes) == 0
    for name in ("trajectories.jsonl", "metrics.jsonl", "config.json"):
        a, b = (out / name).read_bytes(), (alone / name).read_bytes()
        if name == "metrics.jsonl":  # wall-clock fields aside
            assert _without_times(a) == _without_times(b)
            continue
        if name == "config.json":  # the two configs differ in their paths only
            a, b = a.replace(str(out).encode(), b"OUT"), b.replace(str(alone).encode(), b"OUT")
        assert a == b, name
    assert len((out / "trajectories.jsonl").read_text().splitlines()) == episodes


def _without_times(data: bytes) -> list[dict[str, object]]:
    import json

    rows = [json.loads(line) for line in data.decode().splitlines()]
    return [{k: v for k, v in r.items() if "time" not in k and not k.endswith("_s")} for r in rows]


# --------------------------------------------------------------------------- owners and settings


def test_train_refuses_a_finished_eval_directory_and_changes_no_byte(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "ev"
    assert main(["eval", "--pool", "sim-paper", "--suite", "arith", "--policy", "single:0", "--n", "5",
                 "--out", str(out), "--quiet"]) == 0  # fmt: skip
    capsys.readouterr()
    before = _snapshot(out)
    assert _train(out, tmp_path) == 2
    line = _error_line(capsys)
    assert str(out) in line and "another command" in line
    assert _snapshot(out) == before


def test_eval_refuses_a_training_directory(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "run"
    assert _train(out, tmp_path) == 0
    capsys.readouterr()
    before = _snapshot(out)
    args = ["eval", "--pool", "sim-paper", "--suite", "arith", "--policy", "single:0", "--n", "5"]
    assert main([*args, "--out", str(out), "--overwrite", "--quiet"]) == 2
    assert "training run directory" in _error_line(capsys)
    assert _snapshot(out) == before


def test_a_refused_resume_leaves_config_json_and_every_file_as_it_was(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "run"
    assert _train(out, tmp_path, "lam=0.1") == 0
    capsys.readouterr()
    before = _snapshot(out)
    assert _train(out, tmp_path, "lam=0.5") == 2  # a finished run with other settings
    line = _error_line(capsys)
    assert "checkpoint of another run" in line and "env" in line
    assert _snapshot(out) == before  # config.json still says lam 0.1


def test_a_refused_run_on_a_new_path_leaves_no_directory(tmp_path: Path) -> None:
    from puppeteer.evaluation.evaluate import evaluate
    from puppeteer.evaluation.settings import EvalSettings

    out = tmp_path / "new" / "ev"
    with pytest.raises(Exception, match="unknown policy spec"):
        evaluate("no-such-policy", EvalSettings(pool="sim-paper", suite="arith", n=3, out_dir=out))
    assert not out.exists()


# --------------------------------------------------------------------------- failed checkpoint writes


def _torch_write_fails(*args: object, **kwargs: object) -> None:
    raise RuntimeError(
        "[enforce fail at inline_container.cc:672] . PytorchStreamWriter failed writing file data/0: "
        "file write failed"
    )


def test_a_torch_writer_error_keeps_the_previous_checkpoint_and_leaves_no_tmp(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "checkpoint.pt"
    atomic_torch_save({"w": torch.ones(3)}, path)
    before = path.read_bytes()
    monkeypatch.setattr(torch, "save", _torch_write_fails)
    with pytest.raises(CheckpointError) as info:
        atomic_torch_save({"w": torch.zeros(3)}, path)
    message = str(info.value)
    assert "\n" not in message and str(path) in message and "previous file is intact" in message
    assert path.read_bytes() == before and sorted(p.name for p in tmp_path.iterdir()) == ["checkpoint.pt"]


def test_a_file_size_limit_during_a_checkpoint_write_keeps_the_previous_one(tmp_path: Path) -> None:
    """A real short write: ``ulimit -f`` in a child process, torch's own writer fails (EFBIG)."""
    path = tmp_path / "checkpoint.pt"
    atomic_torch_save({"w": torch.ones(4)}, path)
    before = path.read_bytes()
    script = textwrap.dedent(
        f"""
        import resource, signal, sys, torch
        from puppeteer.utils.safeload import CheckpointError, atomic_torch_save
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails with EFBIG
        resource.setrlimit(resource.RLIMIT_FSIZE, (64 * 1024, 64 * 1024))
        try:
            atomic_torch_save({{"w": torch.zeros(1 << 20)}}, {str(path)!r})
        except CheckpointError as e:
            print("refused:", e)
            sys.exit(3)
        """
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=_env())
    assert done.returncode == 3, done.stderr
    assert done.stdout.startswith("refused: could not write") and len(done.stdout.strip().splitlines()) == 1
    assert path.read_bytes() == before and sorted(p.name for p in tmp_path.iterdir()) == ["checkpoint.pt"]
    assert resource.getrlimit(resource.RLIMIT_FSIZE)  # the limit was the child's only


def test_training_on_a_full_disk_stops_in_one_line_and_keeps_the_last_checkpoint(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "run"
    assert _train(out, tmp_path, episodes=32) == 0
    checkpoint = (out / "checkpoint.pt").read_bytes()
    capsys.readouterr()
    monkeypatch.setattr(torch, "save", _torch_write_fails)
    assert _train(out, tmp_path, episodes=64) == 2  # training longer: the next checkpoint fails
    line = _error_line(capsys)
    assert "could not write" in line and "rerun the same command" in line
    assert (out / "checkpoint.pt").read_bytes() == checkpoint
    assert not list(out.rglob("*.tmp"))
    monkeypatch.undo()
    assert _train(out, tmp_path, episodes=64) == 0  # the disk has room again: it resumes and finishes
    assert len((out / "trajectories.jsonl").read_text().splitlines()) == 64
