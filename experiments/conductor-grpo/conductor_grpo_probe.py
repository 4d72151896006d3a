"""Sampled parse rate and per-question reward variance of a conductor, as GRPO would sample it.

Conductor: transformers on CPU (an embedded GGUF key, HF id or local directory); workers: the
pool's backends (sim-paper: instant). Writes ``<out>/samples.jsonl`` and ``<out>/probe.json``
(runs/ is not committed). Set ``OMP_NUM_THREADS`` yourself (1 on a shared 2-core machine).

    OMP_NUM_THREADS=1 python experiments/conductor-grpo/conductor_grpo_probe.py --model \
        smollm2-135m --questions 8 --samples 8 \
        --out runs/probe/smollm2
"""

from __future__ import annotations

import argparse
import json
import logging
import sys

from conductor_probe import ProbeSpec, SamplingSpec, run_probe

from puppeteer.train.conductor_model import ModelSpec


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="smollm2-135m")
    p.add_argument("--suite", default="arith")
    p.add_argument("--pool", default="sim-paper")
    p.add_argument("--split", default="train")
    p.add_argument("--questions", type=int, default=8)
    p.add_argument("--samples", type=int, default=8)
    p.add_argument("--max-new-tokens", type=int, default=256)
    p.add_argument("--temperature", type=float, default=1.0)
    p.add_argument("--top-p", type=float, default=1.0)
    p.add_argument("--repetition-penalty", type=float, default=1.0)
    p.add_argument("--no-stop", action="store_true", help="do not end completions after access_list")
    p.add_argument("--flat", action="store_true", help="completion-style prompt instead of the chat layout")
    p.add_argument("--answer-prefix", default="", help='open the assistant turn, e.g. "model_id = ["')
    p.add_argument("--prompt", default="prompt-v1", help="conductor prompt config (configs/conductor/)")
    p.add_argument("--available", nargs="*", default=None, help="a fixed subset of the pool's agents")
    p.add_argument("--dtype", default="float32")
    p.add_argument("--bf16", action="store_true", help="sample under bf16 autocast (fp32 weights)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default=None)
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    spec = ProbeSpec(
        model=ModelSpec(id=args.model, dtype=args.dtype),
        suite=args.suite,
        pool=args.pool,
        split=args.split,
        questions=args.questions,
        samples=args.samples,
        chat=not args.flat,
        answer_prefix=args.answer_prefix,
        prompt=args.prompt,
        available=tuple(args.available) if args.available else None,
        sampling=SamplingSpec(
            max_new_tokens=args.max_new_tokens,
            temperature=args.temperature,
            top_p=args.top_p,
            repetition_penalty=args.repetition_penalty,
            stop_after_access_list=not args.no_stop,
            autocast_bf16=args.bf16,
        ),
        seed=args.seed,
    )
    summary = run_probe(spec, out=args.out)
    summary.pop("groups")
    json.dump(summary, sys.stdout, indent=2)
    print()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
