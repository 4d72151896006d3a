from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from puppeteer.cli import main

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def wide_console(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "200")  # rich wraps table cells in narrow terminals


def test_pool_show_lists_agents_and_terminator(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["pool", "show", "sim-paper"]) == 0
    out = capsys.readouterr().out
    assert "gpt5-cot" in out and "terminator" in out and "1.25" in out
    assert main(["pool", "show", "no-such-pool"]) == 2
    assert "no-such-pool" in capsys.readouterr().out


def test_pool_calibrate_measures_each_model_and_writes_json(
    tmp_path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """``pool calibrate`` (was scripts/calibrate_local_speed.py): the flags reach the measurement, each
    model's speeds print as they come, ``--out`` (or ``--json``) writes them all; no model is loaded here."""
    seen: list[tuple[object, ...]] = []

    def fake(key: str, threads: int, reps: int, tokens: int, repeat: int) -> dict[str, float]:
        seen.append((key, threads, reps, tokens, repeat))
        return {"prefill_tps": 100.0, "decode_tps": 10.0, "prompt_tokens": 300, "threads": threads}

    monkeypatch.setattr("puppeteer.jobs.calibrate.measure", fake)
    out = tmp_path / "speed.json"
    argv = ["pool", "calibrate", "--models", "smollm2-135m,qwen2.5-coder-0.5b", "--threads", "2"]
    assert main([*argv, "--reps", "1", "--tokens", "8", "--repeat", "2", "--json", str(out)]) == 0
    assert seen == [("smollm2-135m", 2, 1, 8, 2), ("qwen2.5-coder-0.5b", 2, 1, 8, 2)]
    assert set(json.loads(out.read_text())) == {"smollm2-135m", "qwen2.5-coder-0.5b"}
    printed = capsys.readouterr().out
    assert 'smollm2-135m: {"prefill_tps": 100.0, "decode_tps": 10.0' in printed
    # an unknown model or a count that measures nothing: one line, exit 2, before any model loads
    seen.clear()
    assert main(["pool", "calibrate", "--models", "smollm2-135m,no-such-model"]) == 2
    assert main(["pool", "calibrate", "--tokens", "1"]) == 2
    printed = capsys.readouterr().out
    assert "unknown embedded model 'no-such-model'" in printed and "--tokens 1" in printed
    assert seen == []


def test_run_chain_prints_steps_tokens_cost_and_answer(capsys: pytest.CaptureFixture[str]) -> None:
    assert (
        main(
            [
                "run",
                "--pool",
                "sim-paper",
                "--suite",
                "arith",
                "--index",
                "3",
                "--chain",
                "gpt5-cot,qwen3-32b-verify",
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    assert "step 1: gpt5-cot" in out and "step 2: qwen3-32b-verify" in out
    assert "final answer:" in out and "cost=$" in out and "completion=" in out


def test_run_workflow_rejects_hostile_text_without_running_it(capsys: pytest.CaptureFixture[str]) -> None:
    hostile = "model_id = [__import__('os').system('echo pwned')]\nsubtasks = ['x']\naccess_list = [[]]"
    assert (
        main(["run", "--pool", "sim-paper", "--suite", "arith", "--workflow", hostile]) == 2
    )  # rejected: nothing ran
    out = capsys.readouterr().out
    assert "workflow rejected" in out and "pwned" not in out.replace(hostile, "")


def test_train_entry_point_writes_results(tmp_path) -> None:
    out = tmp_path / "run"
    assert (
        main(
            [
                "train",
                "trainer.episodes=64",
                "trainer.batch_episodes=32",
                "policy.encoder=hashing",
                "suite.n_eval=10",
                "suite.n_val=10",
                "wandb.enabled=false",
                f"out={out}",
                f"hydra.run.dir={tmp_path / 'hydra'}",
            ]
        )
        == 0
    )
    results = json.loads((out / "results.json").read_text())
    assert results["episodes"] == 70 and results["backend"] == "sim" and results["n_eval"] == 10
    assert (out / "learning_curve.png").stat().st_size > 1000
    assert (out / "final" / "policy.pt").exists()


def test_version_json_summary_suite_list_and_module_entry(
    tmp_path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 30's CLI habits: --version, eval --json (one JSON object), suite list, python -m puppeteer."""
    import subprocess
    import sys

    assert main(["--version"]) == 0 and capsys.readouterr().out.startswith("puppeteer ")
    args = ["eval", "--pool", "sim-paper", "--suite", "arith", "--policy", "single:gpt5-cot", "--n", "5"]
    assert main([*args, "--json", "--out", str(tmp_path / "e")]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["n"] == 5 and 0.0 <= summary["accuracy"] <= 1.0 and summary["policy"] == "single:gpt5-cot"
    monkeypatch.setenv("COLUMNS", "200")
    assert main(["suite", "list"]) == 0
    listed = capsys.readouterr().out
    assert "mix-local" in listed and "train 256, validation 80, test 320" in listed
    proc = subprocess.run([sys.executable, "-m", "puppeteer", "--version"], capture_output=True, text=True)
    assert proc.returncode == 0 and proc.stdout.startswith("puppeteer ")


@pytest.mark.parametrize(
    "argv",
    [
        ["eval", "--pool", "sim-paper", "--suite", "arith", "--policy", "chain:", "--n", "2"],
        ["eval", "--pool", "sim-paper", "--suite", "arith", "--policy", "single:0", "--available", "nobody"],
        ["run", "--pool", "sim-paper", "--suite", "arith", "--index", "999999", "--chain", "gpt5-cot"],
        ["run", "--pool", "sim-paper", "--workflow", "garbage", "What is 2+2?"],
        ["run", "--pool", "sim-paper", "--policy", "vote:3", "What is the capital of France?"],
        ["serve", "--policy", "vote:3", "--pool", "sim-paper", "--port", "99999"],
        ["serve", "--policy", "vote:3", "--pool", "sim-paper", "--max-concurrency", "0"],
        ["serve", "--policy", "vote:3", "--pool", "sim-paper", "--grader", "nope"],
    ],
)
def test_rejected_input_exits_non_zero_and_writes_nothing(
    argv: list[str], tmp_path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 33 section 2: each of these used to exit 0 (or start a server, or print a traceback)."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("COLUMNS", "300")
    out = ["--out", str(tmp_path / "out")] if argv[0] == "eval" else []
    assert main([*argv, *out]) == 2
    printed = capsys.readouterr().out
    assert "Traceback" not in printed
    if argv[0] != "run" or "--workflow" not in argv:  # a rejected workflow shows what it rejected
        assert len(printed.strip().splitlines()) == 1 and printed.startswith("error:")
    assert not (tmp_path / "out").exists() and not (tmp_path / "runs").exists()


@pytest.mark.parametrize("lam", ["-1", "0,nan", "0.1,abc", ","])
def test_a_sweep_over_bad_cost_weights_launches_nothing(
    lam: str, tmp_path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 33: `sweep --lam -1` left `.hydra/` and a run folder behind before the job rejected it."""
    with pytest.raises(SystemExit) as exit_info:
        main(["sweep", "--lam", lam, "--seeds", "1", "--out", str(tmp_path / "sweep")])
    assert exit_info.value.code == 2
    assert "--lam" in capsys.readouterr().err
    assert not (tmp_path / "sweep").exists()


REFUSING_POOL = """
name: refusing
backend_options:
  litellm: {num_retries: 0, timeout: 5}
models:
  m:
    backend: litellm
    target: openai/some-model
    params_b: 1
    price_in: 1
    price_out: 1
    options: {api_base: "http://127.0.0.1:9/v1", api_key: sk-not-a-key}
agents:
  - {name: a, model: m, pattern: cot, description: a model behind a server that refuses}
"""


def test_a_litellm_server_that_refuses_is_one_line_and_a_non_zero_exit(
    tmp_path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 33: `run` showed a LiteLLMCallError traceback, and `eval` exited 0 after every item failed."""
    monkeypatch.setenv("LITELLM_OFFLINE_MODE", "true")
    monkeypatch.setenv("COLUMNS", "300")
    pool = tmp_path / "refusing.yaml"
    pool.write_text(REFUSING_POOL)
    assert main(["run", "--pool", str(pool), "--chain", "a", "What is 2+2?"]) == 2
    printed = capsys.readouterr().out  # (litellm's own log lines may precede ours when a test set it up)
    ours = [line for line in printed.splitlines() if line.startswith("error:")]
    assert len(ours) == 1 and ours[0].startswith("error: litellm call for model 'm'")
    assert "Traceback" not in printed and "puppeteer/cli/" not in printed and "sk-not-a-key" not in printed
    argv = ["eval", "--pool", str(pool), "--suite", "arith", "--policy", "single:a", "--n", "1"]
    assert main([*argv, "--no-cache", "--out", str(tmp_path / "e")]) == 1
    assert "every one of the 1 items failed" in capsys.readouterr().out


def test_version_answers_without_importing_the_heavy_stack() -> None:
    """`puppeteer --version` took 4-7 s (27-30 s on a loaded 2-core machine): it imported torch and
    every command group before argparse answered. It now answers first, in about a second."""
    import subprocess
    import sys

    code = (
        "import sys\n"
        "from puppeteer.cli import main\n"
        "assert main(['-v', '--version']) == 0\n"
        "heavy = ('torch', 'transformers', 'hydra', 'puppeteer.cli.app')\n"
        "print(sorted(m for m in heavy if m in sys.modules))\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    version, loaded = proc.stdout.splitlines()
    assert version.startswith("puppeteer ") and loaded == "[]"


def test_pool_show_into_a_pipe_cuts_no_row() -> None:
    """Written to a file or a pipe, rich wrapped at 80 columns: `pool show` cut its rows and printed paths
    broke across lines. Each agent's row is now one whole line."""
    import subprocess
    import sys

    from puppeteer.agents.pool import load_pool

    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"}
    cmd = [sys.executable, "-m", "puppeteer", "pool", "show", "sim-routing"]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    pool = load_pool("sim-routing")
    assert any(pool.description.strip() in line for line in lines)  # the description is not wrapped either
    for i, agent in enumerate(pool.agents):
        cells = [
            str(i),
            agent.name,
            agent.model.target,
            f"{agent.model.price_in:g}",
            f"{agent.model.price_out:g}",
        ]
        row = [line for line in lines if f" {agent.name} " in line]
        assert len(row) == 1 and all(f" {cell} " in row[0] for cell in cells), (agent.name, row)


def test_train_takes_a_pool_file_as_eval_does(tmp_path) -> None:
    """`puppeteer eval --pool my.yaml` worked, `puppeteer train pool=my.yaml` failed (Hydra looked for a
    group option 'pool//.../my.yaml'): a path in pool= (or suite=) becomes pool.name=, which loads it."""
    import yaml

    from puppeteer.errors import UserError
    from puppeteer.train.config_schema import file_overrides

    raw = yaml.safe_load((REPO / "agents" / "sim-paper.yaml").read_text())
    raw["name"] = "my-pool"
    mine = tmp_path / "my.yaml"
    mine.write_text(yaml.safe_dump(raw))
    suite = REPO / "envs" / "arith.yaml"
    given = ["pool=sim-paper", f"pool={mine}", f"suite={suite}", "lam=0.1", "-m"]
    want = ["pool=sim-paper", f"pool.name={mine}", f"suite.name={suite}", "lam=0.1", "-m"]
    assert file_overrides(given) == want
    sweep = file_overrides([f"pool=sim-paper,{mine}", "+pool.x=1"])
    assert sweep == [f"pool.name=sim-paper,{mine}", "+pool.x=1"]
    with pytest.raises(UserError, match=r"pool=nowhere/my\.yaml: no such file"):
        file_overrides(["pool=nowhere/my.yaml"])
    out = tmp_path / "run"
    argv = [
        "train",
        f"pool={mine}",
        "trainer.episodes=32",
        "trainer.batch_episodes=32",
        "policy.encoder=hashing",
        "suite.n_eval=5",
        "suite.n_val=5",
        "wandb.enabled=false",
        f"out={out}",
        f"hydra.run.dir={tmp_path / 'hydra'}",
    ]
    assert main(argv) == 0
    assert json.loads((out / "results.json").read_text())["pool"] == "my-pool"


def test_eval_json_stdout_is_one_object_whatever_a_library_prints(
    tmp_path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # transformers prints "[INFO] Running in WANDB offline mode" to stdout on import when WANDB_MODE is
    # offline; a trained policy's encoder imports it during the evaluation, which broke `--json | jq`
    import puppeteer.cli.eval as eval_cli

    real = eval_cli.evaluate_policy

    def noisy(*args, **kwargs):
        print("[INFO] Running in WANDB offline mode")
        return real(*args, **kwargs)

    monkeypatch.setattr(eval_cli, "evaluate_policy", noisy)
    args = ["eval", "--pool", "sim-paper", "--suite", "arith", "--policy", "single:gpt5-cot", "--n", "3"]
    assert main([*args, "--json", "--out", str(tmp_path / "e")]) == 0
    captured = capsys.readouterr()
    assert json.loads(captured.out)["n"] == 3  # the whole of stdout parses
    assert "WANDB offline" in captured.err


def test_eval_agents_evaluates_a_policy_trained_on_a_subset_of_the_pool(
    tmp_path, capsys: pytest.CaptureFixture[str]
) -> None:
    from puppeteer.agents.pool import load_pool
    from puppeteer.policies.puppeteer import PolicyConfig, PuppeteerPolicy

    pool = load_pool("sim-paper")
    names = [a.name for a in pool.agents][:3]
    policy_dir = PuppeteerPolicy(pool.subset(names), PolicyConfig(encoder="hashing", hidden=8), seed=0).save(
        tmp_path / "policy"
    )
    args = [
        "eval",
        "--pool",
        "sim-paper",
        "--suite",
        "arith",
        "--policy",
        f"puppeteer:{policy_dir}",
        "--n",
        "4",
    ]
    # on the whole pool: refused, and the message names the flag that fixes it
    assert main([*args, "--out", str(tmp_path / "whole")]) != 0
    assert f"--agents {','.join(names)}" in capsys.readouterr().out.replace("\n", "")
    assert main([*args, "--agents", ",".join(names), "--json", "--out", str(tmp_path / "sub")]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["n"] == 4 and summary["pool"] == f"sim-paper[{','.join(names)}]"
    used = {
        s["agent_name"]
        for line in (tmp_path / "sub" / "trajectories.jsonl").read_text().splitlines()
        for s in json.loads(line)["steps"]
    }
    assert used and used <= set(names)
