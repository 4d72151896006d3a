"""Parse rate of a conductor LM under two prompt layouts, on the same items.

* ``chat``: the env's chat layout (system message, few-shot examples as earlier user/assistant
  turns whose answers are exactly the three lists, the question last): what ``ConductorPolicy``
  sends.
* ``flat``: the same content as ONE user message (``obs["prompt"]``), the layout that DESIGN.md
  measured at 1 of 6 parsed with an earlier prompt.

Writes counts and parse errors only (no item text) as JSON to stdout and ``--out``. Calls go
through the shared response cache, so a re-run replays.

    python experiments/conductor/conductor_prompt_probe.py --model qwen2.5-coder-0.5b --n 8
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from puppeteer.backends import make_router
from puppeteer.backends.cache import default_response_cache
from puppeteer.envs.conductor_prompt import ConductorPrompt
from puppeteer.envs.env import ConductorEnv
from puppeteer.envs.rollout import run_episode
from puppeteer.policies.conductor import ConductorPolicy, conductor_model
from puppeteer.types import Message
from puppeteer.utils.seeding import item_seed


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="qwen2.5-coder-1.5b", help="what follows conductor: in a spec")
    p.add_argument("--pool", default="sim-paper")
    p.add_argument("--suite", default="mix-math-mmlu")
    p.add_argument("--n", type=int, default=8)
    p.add_argument("--max-tokens", type=int, default=256)
    p.add_argument("--out", default=None)
    args = p.parse_args(argv)
    env = ConductorEnv(mode="workflow", pool=args.pool, suite=args.suite, split="test", n_tasks=args.n)
    backend = make_router({"llamacpp": {"n_ctx": 4096}}, cache=default_response_cache())
    policy = ConductorPolicy(model=conductor_model(args.model), max_tokens=args.max_tokens, backend=backend)
    report: dict[str, object] = {
        "model": args.model,
        "pool": args.pool,
        "suite": args.suite,
        "n": args.n,
        "max_tokens": args.max_tokens,
    }
    for layout in ("chat", "flat"):
        parsed, errors, tokens = 0, [], []
        for i, task in enumerate(env.tasks):

            def write(obs: dict, info: dict, layout: str = layout) -> str:
                prompt: ConductorPrompt = info["conductor_prompt"]
                if layout == "flat":
                    prompt = ConductorPrompt((Message("user", obs["prompt"]),))
                return policy.write(prompt)

            step_info = run_episode(
                env, write, seed=item_seed(0, task.id), options={"task_index": i}, start=policy.reset
            ).info
            tokens.append(policy.calls[-1].completion_tokens)
            if step_info["parse_error"] is None:
                parsed += 1
            else:
                errors.append(step_info["parse_error"])
        report[layout] = {
            "parsed": parsed,
            "errors": errors,
            "mean_completion_tokens": sum(tokens) / len(tokens),
        }
    text = json.dumps(report, indent=2)
    sys.stdout.write(text + "\n")
    if args.out:
        Path(args.out).write_text(text + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
