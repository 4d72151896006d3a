"""End-to-end wall time, batched decoding on vs off, side by side in one run (backend: llamacpp).

Issue 13's end-to-end goal: the quickstart and the baselines table on a fresh response cache,
with llama.cpp's batched decoding (the default) against the one-at-a-time path
(``batching=False``), both with every CPU as llama.cpp threads. Each workload runs as its own
process (models loaded, start-up included, as a user sees it), each time on a new, empty response
cache; the arms alternate within a round, and in every other round the order is swapped.
Each finished run appends one JSON line to ``--jsonl`` at once, so a stopped benchmark keeps what
it measured, and a rerun skips the (workload, arm, round) lines already there.

    python benchmarks/bench_end_to_end.py --out runs/e2e --workloads quickstart baselines --rounds 1

The machine should be idle: the load average before and after each run is recorded beside it.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from sidebyside import ARMS, Workload, done_keys, read_rows, table


def _quickstart(
    n_train: int, n_eval: int, episodes: int, after_call: int
) -> Callable[[Path, Path], list[str]]:
    # --replay off: the quickstart's pool ships every response it needs (agents/local-mix.replay/),
    # so without it the run would time the replay, not the models
    def command(run: Path, cache: Path) -> list[str]:
        return [
            "puppeteer",
            "quickstart",
            "--replay",
            "off",
            "--n-train",
            str(n_train),
            "--n-eval",
            str(n_eval),
            "--episodes",
            str(episodes),
            "--after-call-episodes",
            str(after_call),
            "--out",
            str(run / "qs"),
            "--cache",
            str(cache),
        ]

    return command


def _baselines(specs: tuple[str, ...], n: int) -> Callable[[Path, Path], list[str]]:
    def command(run: Path, cache: Path) -> list[str]:
        return [
            sys.executable,
            "experiments/baselines-local/baselines_table.py",
            "--pool",
            "local",
            "--suites",
            "gsm8k",
            "--n",
            str(n),
            "--specs",
            *specs,
            "--cache",
            str(cache),
            "--runs-dir",
            str(run / "runs"),
            "--out",
            str(run / "table.md"),
            "--no-plot",
            "--quiet",
        ]

    return command


SINGLES = (
    "single:qwen1.5b-cot",
    "single:qwen1.5b-python",
    "single:qwen1.5b-verify",
    "single:qwen0.5b-cot",
    "single:qwen0.5b-direct",
    "single:qwen0.5b-calc",
    "single:qwen0.5b-summarize",
    "single:smollm2-direct",
    "single:smollm2-cot",
)


def workloads(
    n_baselines: int, qs_train: int = 16, qs_eval: int = 16, qs_episodes: int = 512, qs_after_call: int = 0
) -> dict[str, Workload]:
    return {
        "quickstart": Workload(
            "quickstart",
            f"`puppeteer quickstart --replay off` (pool local-mix, 8 agents on 2 models: train {qs_episodes} "
            f"episodes on {qs_train} items, {qs_after_call} after the router's call, evaluate 6 policies on "
            f"{qs_eval} held-out items)",
            _quickstart(qs_train, qs_eval, qs_episodes, qs_after_call),
        ),
        "baselines": Workload(
            "baselines",
            "`experiments/baselines-local/baselines_table.py --pool local --suites gsm8k "
            f"--n {n_baselines}`: the 9 single agents, `vote:3` and `chain`",
            _baselines((*SINGLES, "vote:3", "chain"), n_baselines),
        ),
    }


def load1() -> float:
    return os.getloadavg()[0]


def run_one(w: Workload, arm: str, rnd: int, out: Path, log: Path) -> dict[str, object]:
    run = out / w.name / f"{arm}-r{rnd}"
    run.mkdir(parents=True, exist_ok=True)
    cache = run / "responses.sqlite"
    for stale in run.glob("responses.sqlite*"):
        stale.unlink()  # a fresh cache: every model call is computed
    cmd = w.command(arm, run, cache)
    before = load1()
    start = time.perf_counter()
    with (run / "output.log").open("w") as sink:
        rc = subprocess.run(cmd, stdout=sink, stderr=subprocess.STDOUT, check=False).returncode
    wall = time.perf_counter() - start
    row = {
        "workload": w.name,
        "arm": arm,
        "round": rnd,
        "rc": rc,
        "wall_s": round(wall, 1),
        "load1_before": round(before, 2),
        "load1_after": round(load1(), 2),
        "command": shlex.join(cmd),
        "finished": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    with log.open("a") as f:
        f.write(json.dumps(row) + "\n")
    return row


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", default="runs/e2e")
    p.add_argument("--workloads", nargs="+", default=["quickstart", "baselines"])
    p.add_argument("--rounds", type=int, default=1)
    p.add_argument("--n-baselines", type=int, default=16, help="GSM8K items of the baselines workload")
    p.add_argument("--qs-train", type=int, default=16, help="training items of the quickstart workload")
    p.add_argument("--qs-eval", type=int, default=16, help="held-out items of the quickstart workload")
    p.add_argument("--qs-episodes", type=int, default=512, help="REINFORCE episodes, quickstart workload")
    p.add_argument(
        "--qs-after-call-episodes",
        type=int,
        default=0,
        help="episodes of the quickstart's second stage (0, the default: the one-call router alone, as "
        "timed before the second stage existed; the second stage calls every agent again after the "
        "router's call on each training item, an hour more one at a time on 2 cores)",
    )
    args = p.parse_args(argv)
    ws = workloads(
        args.n_baselines, args.qs_train, args.qs_eval, args.qs_episodes, args.qs_after_call_episodes
    )
    unknown = sorted(set(args.workloads) - set(ws))
    if unknown:
        p.error(f"unknown workload(s) {unknown}; choose from {sorted(ws)}")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    log = out / "e2e.jsonl"
    done = done_keys(log)
    for rnd in range(args.rounds):
        arms = ARMS if rnd % 2 == 0 else ARMS[::-1]
        for name in args.workloads:
            for arm in arms:
                if (name, arm, rnd) in done:
                    continue
                sys.stderr.write(f"[{time.strftime('%H:%M:%S')}] {name} / {arm} / round {rnd} ...\n")
                row = run_one(ws[name], arm, rnd, out, log)
                load = f"load {row['load1_before']} -> {row['load1_after']}"
                sys.stderr.write(f"  rc {row['rc']}, {row['wall_s']} s ({load})\n")
    rows = read_rows(log)
    chosen = {k: ws[k] for k in args.workloads}
    sys.stdout.write(table(rows, chosen) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
