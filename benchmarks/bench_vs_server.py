"""The embedded engine against llama.cpp's own ``llama-server``, side by side (backend: llamacpp).

Issue 35's comparison: the same GGUF, the same prompts (the first ``--n`` GSM8K test questions as
the ``local`` pool's ``qwen0.5b-cot`` agent asks them: its system and user messages), greedy, a
``--tokens`` cap, ``--threads`` threads, all requests in flight at once. Two kinds of arm:

- ``server``: ``llama-server -t T -tb T --parallel N -c N*SLOT -cb`` on the loopback interface,
  started and stopped by this benchmark; requests are OpenAI chat calls over HTTP (what litellm
  would send), timed from the first request to the last response, once ``/health`` says it is up.
- ``engine`` arms: :class:`~puppeteer.backends.llamacpp.LlamaCppBackend` with batching on and the
  model loaded before timing; the ``N`` calls go through ``acomplete`` at once. Arms differ in the
  engine's options (``--engine-arm NAME=KEY:VALUE,...``, e.g. ``fa=flash_attn:true``).

Every arm starts fresh in every round (a new server process, a new backend), so no arm keeps the
previous round's prompts in its cache; the arm order rotates from round to round. Each finished
(model, arm, round) appends one JSON line to ``--jsonl`` at once, and a rerun skips the lines
already there. Completion and prompt tokens per second are the arm's token counts over its wall time.

    python benchmarks/bench_vs_server.py --server-bin /path/to/llama-server --jsonl runs/vs_server.jsonl

The machine should be idle: the 1-minute load average before each run is recorded beside it.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import socket
import statistics
import subprocess
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from puppeteer.agents.pool import load_pool
from puppeteer.agents.reasoning import ANSWER_FORMATS, DEFAULT_FORMAT, worker_messages
from puppeteer.backends.llamacpp import LlamaCppBackend
from puppeteer.backends.models import EMBEDDED_MODELS, model_path
from puppeteer.tasks.suites import load_suite
from puppeteer.types import CompletionRequest, Message, ModelSpec


@dataclass(frozen=True)
class Measured:
    wall_s: float
    prompt_tokens: int
    completion_tokens: int

    def row(self) -> dict[str, float]:
        return {
            "wall_s": round(self.wall_s, 3),
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "completion_tok_s": round(self.completion_tokens / self.wall_s, 2),
            "prompt_tok_s": round(self.prompt_tokens / self.wall_s, 2),
        }


def gsm8k_messages(n: int, agent_name: str = "qwen0.5b-cot") -> list[tuple[Message, ...]]:
    """The messages ``agent_name`` of the ``local`` pool gets for the first ``n`` GSM8K test items."""
    pool = load_pool("local")
    agent = pool.agent(pool.index(agent_name))
    items = load_suite("gsm8k", "test", n=n)
    return [
        worker_messages(agent, t.question, t.question, (), ANSWER_FORMATS.get(t.grader, DEFAULT_FORMAT))
        for t in items
    ]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _load() -> float:
    return os.getloadavg()[0]


def run_server(
    binary: str, gguf: Path, prompts: Sequence[tuple[Message, ...]], args: argparse.Namespace
) -> Measured:
    n, port = len(prompts), _free_port()
    command = [
        binary,
        "-m",
        str(gguf),
        "-t",
        str(args.threads),
        "-tb",
        str(args.threads),
        "--parallel",
        str(n),
        "-c",
        str(n * args.slot_ctx),
        "-cb",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--no-webui",
        *args.server_arg,
    ]
    log = open(args.server_log, "ab")  # noqa: SIM115 - closed below, after the process
    proc = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    try:
        with httpx.Client(timeout=httpx.Timeout(1800.0)) as client:
            deadline = time.monotonic() + 300
            while True:
                if proc.poll() is not None:
                    raise RuntimeError(f"llama-server exited with {proc.returncode}; see {args.server_log}")
                try:
                    if client.get(f"{base}/health").status_code == 200:
                        break
                except httpx.TransportError:
                    pass
                if time.monotonic() > deadline:
                    raise TimeoutError("llama-server did not come up in 300 s")
                time.sleep(0.2)

            def call(messages: tuple[Message, ...]) -> dict[str, Any]:
                body = {
                    "model": gguf.stem,
                    "messages": [{"role": m.role, "content": m.content} for m in messages],
                    "max_tokens": args.tokens,
                    "temperature": 0.0,
                    "seed": 0,
                }
                reply = client.post(f"{base}/v1/chat/completions", json=body)
                reply.raise_for_status()
                return dict(reply.json()["usage"])

            start = time.perf_counter()
            with ThreadPoolExecutor(max_workers=n) as pool:
                usages = list(pool.map(call, prompts))
            wall = time.perf_counter() - start
    finally:
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()
    return Measured(
        wall, sum(u["prompt_tokens"] for u in usages), sum(u["completion_tokens"] for u in usages)
    )


def run_engine(
    key: str, options: dict[str, Any], prompts: Sequence[tuple[Message, ...]], args: argparse.Namespace
) -> Measured:
    n = len(prompts)
    backend = LlamaCppBackend(n_threads=args.threads, n_parallel=n, kv_size=n * args.slot_ctx, **options)
    spec = ModelSpec(name=key, backend="llamacpp", target=key, params_b=EMBEDDED_MODELS[key].params_b)
    requests = [
        CompletionRequest(model=spec, messages=m, max_tokens=args.tokens, temperature=0.0) for m in prompts
    ]
    try:
        backend.batcher(key)  # load the model (and make the batched context) before timing

        async def all_at_once() -> list[Any]:
            return await asyncio.gather(*(backend.acomplete(r) for r in requests))

        start = time.perf_counter()
        done = asyncio.run(all_at_once())
        wall = time.perf_counter() - start
    finally:
        backend.close()
    return Measured(wall, sum(c.prompt_tokens for c in done), sum(c.completion_tokens for c in done))


def _value(text: str) -> Any:
    lowered = text.lower()
    if lowered in ("true", "false"):
        return lowered == "true"
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


def parse_arm(text: str) -> tuple[str, dict[str, Any]]:
    """``NAME=KEY:VALUE,KEY:VALUE`` (or just ``NAME``) -> the engine arm's backend options."""
    name, _, rest = text.partition("=")
    options = {}
    for pair in filter(None, rest.split(",")):
        key, sep, value = pair.partition(":")
        if not sep:
            raise argparse.ArgumentTypeError(f"engine option {pair!r} is not KEY:VALUE")
        options[key] = _value(value)
    return name, options


def done_keys(path: Path) -> set[tuple[str, str, int]]:
    if not path.exists():
        return set()
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return {(r["model"], r["arm"], r["round"]) for r in rows}


def summary(path: Path) -> str:
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    lines = [
        "| model | arm | rounds | completion tok/s (median) | prompt tok/s (median) | vs server |",
        "|---|---|---:|---:|---:|---:|",
    ]
    for model in dict.fromkeys(r["model"] for r in rows):
        mine = [r for r in rows if r["model"] == model]
        server = {r["round"]: r["completion_tok_s"] for r in mine if r["arm"] == "server"}
        for arm in dict.fromkeys(r["arm"] for r in mine):
            runs = [r for r in mine if r["arm"] == arm]
            ratios = [r["completion_tok_s"] / server[r["round"]] for r in runs if r["round"] in server]
            lines.append(
                f"| {model} | {arm} | {len(runs)} "
                f"| {statistics.median(r['completion_tok_s'] for r in runs):.1f} "
                f"| {statistics.median(r['prompt_tok_s'] for r in runs):.1f} "
                f"| {statistics.median(ratios):.2f} |"
                if ratios
                else f"| {model} | {arm} | {len(runs)} | - | - | - |"
            )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    raw = argparse.RawDescriptionHelpFormatter
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=raw)
    found = os.environ.get("LLAMA_SERVER") or shutil.which("llama-server")
    parser.add_argument("--server-bin", default=found)
    parser.add_argument("--models", nargs="+", default=["qwen2.5-coder-0.5b", "qwen2.5-coder-1.5b"])
    parser.add_argument("--n", type=int, default=16, help="requests, all in flight at once")
    parser.add_argument("--tokens", type=int, default=256, help="max_tokens of every request")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--slot-ctx", type=int, default=1024, help="KV cells per request (both engines)")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument(
        "--engine-arm",
        action="append",
        type=parse_arm,
        help="NAME=KEY:VALUE,... backend options of an engine arm (repeatable; default: engine)",
    )
    parser.add_argument("--server-arg", action="append", default=[], help="extra llama-server argument")
    parser.add_argument("--no-server", action="store_true", help="engine arms only")
    parser.add_argument("--jsonl", type=Path, default=Path("runs/vs_server.jsonl"))
    parser.add_argument("--server-log", type=Path, default=Path("runs/vs_server.server.log"))
    args = parser.parse_args(argv)
    if not args.no_server and not args.server_bin:
        parser.error("no llama-server: pass --server-bin, set LLAMA_SERVER, or put it on PATH")
    engine_arms = dict(args.engine_arm or [("engine", {})])
    args.jsonl.parent.mkdir(parents=True, exist_ok=True)
    args.server_log.parent.mkdir(parents=True, exist_ok=True)
    prompts = gsm8k_messages(args.n)
    arms = ([] if args.no_server else ["server"]) + list(engine_arms)
    done = done_keys(args.jsonl)
    for model in args.models:
        gguf = model_path(model)
        for rnd in range(args.rounds):
            order = arms[rnd % len(arms) :] + arms[: rnd % len(arms)]
            for arm in order:
                if (model, arm, rnd) in done:
                    continue
                load = _load()
                if arm == "server":
                    measured = run_server(args.server_bin, gguf, prompts, args)
                else:
                    measured = run_engine(model, engine_arms[arm], prompts, args)
                row = {"model": model, "arm": arm, "round": rnd, "load1_before": load, **measured.row()}
                if arm != "server":
                    row["options"] = engine_arms[arm]
                with args.jsonl.open("a") as f:
                    f.write(json.dumps(row) + "\n")
                print(json.dumps(row), flush=True)
    print(summary(args.jsonl))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
