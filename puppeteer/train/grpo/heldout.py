"""Greedy held-out evaluation of the conductor LM: generation, the summary of its plans' outcomes, and
the paired comparison of a run's before and after."""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from puppeteer.envs.env import ConductorEnv
from puppeteer.evaluation.stats import wilson_interval
from puppeteer.integrations.trl import (
    WorkflowOutcome,
    WorkflowScorer,
    conductor_rows,
    prefixed_rows,
    prompt_token_counter,
    summarize,
)
from puppeteer.types import Completion

if TYPE_CHECKING:
    from transformers import PreTrainedModel, PreTrainedTokenizerBase
from puppeteer.train.grpo.config import EvalSpec

log = logging.getLogger(__name__)


def generate(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    prompts: Sequence[str | Sequence[Mapping[str, str]]],
    max_new_tokens: int,
    batch_size: int = 8,
    repetition_penalty: float = 1.0,
    autocast_bf16: bool = False,
) -> list[str]:
    """Greedy completions, batched with left padding; prompts as text or as chat messages."""
    import torch

    texts = [
        p
        if isinstance(p, str)
        else tokenizer.apply_chat_template(list(p), tokenize=False, add_generation_prompt=True)
        for p in prompts
    ]
    chat = not isinstance(prompts[0], str) if prompts else False
    order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
    out: dict[int, str] = {}
    was_training = model.training
    model.eval()
    try:
        for lo in range(0, len(order), batch_size):
            idx = order[lo : lo + batch_size]
            enc = tokenizer(
                [texts[i] for i in idx], return_tensors="pt", padding=True, add_special_tokens=not chat
            ).to(model.device)
            autocast = torch.autocast(model.device.type, dtype=torch.bfloat16, enabled=autocast_bf16)
            with torch.no_grad(), autocast:
                gen = model.generate(
                    **enc,
                    max_new_tokens=max_new_tokens,
                    do_sample=False,
                    repetition_penalty=repetition_penalty,
                    pad_token_id=tokenizer.pad_token_id,
                )
            new = gen[:, enc["input_ids"].shape[1] :]
            for i, row in zip(idx, tokenizer.batch_decode(new, skip_special_tokens=True), strict=True):
                out[i] = row
            log.info("generated %d/%d held-out completions", len(out), len(texts))
    finally:
        model.train(was_training)
    return [out[i] for i in range(len(texts))]


def heldout_summary(outcomes: Sequence[WorkflowOutcome]) -> dict[str, Any]:
    n = len(outcomes)
    correct = sum(o.correct for o in outcomes)
    parsed = sum(o.parsed for o in outcomes)
    return {
        "n": n,
        **summarize(outcomes),
        "accuracy_ci95": list(wilson_interval(correct, n)),
        "parse_rate_ci95": list(wilson_interval(parsed, n)),
    }


def evaluate_conductor(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    env: ConductorEnv,
    spec: EvalSpec,
    chat: bool,
    seed: int,
    records: Path | None = None,
    workers: int = 16,
    answer_prefix: str = "",
) -> dict[str, Any]:
    """Greedy workflows for every item of ``env``, executed and graded: accuracy, parse rate, Wilson CIs."""
    rows = conductor_rows(env, chat=chat, seed=seed)
    if answer_prefix:
        rows = prefixed_rows(rows, tokenizer, answer_prefix)
    t0 = time.perf_counter()
    completions = generate(
        model,
        tokenizer,
        [r["prompt"] for r in rows],
        spec.max_new_tokens,
        spec.batch_size,
        spec.repetition_penalty,
        bool(spec.autocast_bf16),
    )
    per_item = (time.perf_counter() - t0) / max(len(rows), 1)
    outcomes = WorkflowScorer(env, max_workers=workers, seed=seed, answer_prefix=answer_prefix).score(
        [r["task_id"] for r in rows],
        completions,
        [r["available"] for r in rows],
        [r["lam"] for r in rows],
        conductor_completions(tokenizer, [r["prompt"] for r in rows], completions, per_item),
    )
    if records is not None:
        with records.open("w") as f:
            for o, text, row in zip(outcomes, completions, rows, strict=True):
                line = {
                    **o.__dict__,
                    "available": row["available"],
                    "lam": row["lam"],
                    "completion": answer_prefix + text,
                }
                f.write(json.dumps(line) + "\n")
    return heldout_summary(outcomes)


def conductor_completions(
    tokenizer: PreTrainedTokenizerBase, prompts: Sequence[Any], texts: Sequence[str], latency_s: float
) -> list[Completion]:
    """The conductor's generations as completions (prompt and completion tokens, the batch's time
    shared out per item), for the reward env to count in each workflow's cost."""
    count = prompt_token_counter(tokenizer)
    out = []
    for prompt, text in zip(prompts, texts, strict=True):
        tokens = len(tokenizer(text, add_special_tokens=False)["input_ids"])
        out.append(Completion(text, count(prompt), tokens, None, 0.0, latency_s, "conductor"))
    return out


def paired_heldout(before: Path, after: Path) -> dict[str, Any] | None:
    """Exact McNemar tests of the after-training conductor against the before on the same held-out items.

    ``before`` and ``after`` are the ``heldout_{before,after}.jsonl`` records (one line per item, with
    ``task_id``, ``correct`` and ``parsed``); None when either is missing or they name other items.
    """
    from puppeteer.evaluation.stats import mcnemar_exact

    if not (before.is_file() and after.is_file()):
        return None
    rows = [{r["task_id"]: r for r in map(json.loads, p.read_text().splitlines())} for p in (before, after)]
    if rows[0].keys() != rows[1].keys():
        return None
    ids = sorted(rows[0])
    out: dict[str, Any] = {"n": len(ids)}
    for key in ("correct", "parsed"):
        test = mcnemar_exact([bool(rows[0][i][key]) for i in ids], [bool(rows[1][i][key]) for i in ids])
        out[key] = {
            "diff": test.diff,
            "only_before": test.only_a,
            "only_after": test.only_b,
            "p_value": test.p_value,
        }
    return out
