"""Evaluate a finished conductor GRPO run on any items, as an ordinary eval run directory.

The trained conductor plans with its run's own settings (``config.json``): the prompt version, the
chat layout, the answer prefix, the agents it was offered, the stop after ``access_list`` and the
held-out generation settings. The output directory holds ``results.json`` and ``trajectories.jsonl``
in ``puppeteer eval``'s format (each line with the conductor's text and its planning rounds), so
``puppeteer ab``, ``puppeteer graph`` and :func:`puppeteer.analytics.load` take it like any run::

    python scripts/conductor_heldout.py runs/grpo --suite arith --n 400 --out runs/ab/grpo-arith
    puppeteer ab runs/ab/grpo-arith runs/ab/puppeteer-arith --pool sim-paper --suite arith

Items and reset seeds are :func:`puppeteer.evaluation.evaluate_policy`'s (the first ``n`` of the
split in the ``seed`` order, ``item_seed(seed, task id)``), so the episodes pair item for item with
any other policy evaluated on the same pool, suite, split and seed.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from puppeteer.errors import UserError
from puppeteer.evaluation import EvalResult, check_out_dir, record_episodes
from puppeteer.integrations.trl import WorkflowScorer, conductor_rows, prefixed_rows
from puppeteer.policies.conductor import GRPO_RUN_PREFIX
from puppeteer.tasks.suites import load_suite
from puppeteer.train.conductor_generation import install_access_list_stop
from puppeteer.train.conductor_model import Loaded, load_conductor_model
from puppeteer.train.grpo import GRPOJob, generate

if TYPE_CHECKING:
    from collections.abc import Sequence

    from puppeteer.env import ConductorEnv
    from puppeteer.pool import Pool

log = logging.getLogger(__name__)


def load_job(run_dir: str | Path) -> GRPOJob:
    """The :class:`GRPOJob` a run was trained with (its ``config.json``)."""
    path = Path(run_dir) / "config.json"
    if not path.is_file():
        raise FileNotFoundError(f"{run_dir} is not a conductor GRPO run directory (no config.json)")
    return GRPOJob.from_mapping(json.loads(path.read_text()))


def load_trained(run_dir: str | Path, job: GRPOJob) -> Loaded:
    """The trained conductor of ``run_dir/final``: LoRA adapters merged into the base model, or the
    fully fine-tuned weights; the tokenizer set up for left-padded batched generation."""
    final = Path(run_dir) / "final"
    if not final.is_dir():
        raise FileNotFoundError(f"{run_dir} has no final/ model: the run has not finished")
    if (final / "adapter_config.json").is_file():
        from peft import PeftModel

        base, tokenizer = load_conductor_model(job.model)
        model = PeftModel.from_pretrained(base, str(final)).merge_and_unload()
    else:
        model, tokenizer = load_conductor_model(dataclasses.replace(job.model, id=str(final), source="hf"))
    if job.stop_after_access_list:
        install_access_list_stop(model, tokenizer)
    return model, tokenizer


def _env(job: GRPOJob, suite: str, split: str, n: int | None, seed: int) -> ConductorEnv:
    """The run's env (pool, agents, prompt, step limit, cost model) on ``suite``'s items."""
    tasks = load_suite(suite, split, n=n, seed=seed)
    if not tasks:
        raise ValueError(f"no items in {suite}/{split}")
    return job.env(split, n, tasks=tasks)


def evaluate_spec(
    spec: str,
    pool: str | Path | Pool,
    suite: str,
    split: str = "test",
    n: int | None = None,
    seed: int = 0,
    out_dir: str | Path | None = None,
    *,
    overwrite: bool = False,
    available: Sequence[str] | None = None,
) -> EvalResult:
    """:func:`~puppeteer.evaluation.evaluate_policy` for ``conductor:grpo:RUN``: the pool and agents must
    be the run's (the conductor's prompt lists them; its plans name them by id)."""
    run_dir = spec.strip().removeprefix(GRPO_RUN_PREFIX)
    job = load_job(run_dir)
    name = pool if isinstance(pool, str | Path) else pool.name
    if str(name) != job.pool:
        raise UserError(f"{spec} was trained on pool {job.pool!r}: evaluate it there, not on {str(name)!r}")
    if available and tuple(available) != tuple(job.available or ()):
        raise UserError(f"{spec} plans for the agents it was trained with: {job.available}; got --available")
    return evaluate_run(run_dir, out_dir, suite=suite, split=split, n=n, seed=seed, overwrite=overwrite)


def evaluate_run(
    run_dir: str | Path,
    out_dir: str | Path | None,
    *,
    suite: str | None = None,
    split: str | None = None,
    n: int | None = None,
    seed: int = 0,
    batch_size: int | None = None,
    workers: int = 16,
    overwrite: bool = False,
) -> EvalResult:
    """Greedy plans of ``run_dir``'s trained conductor for the first ``n`` items of ``suite``/``split``
    (default: the run's suite and held-out split), executed, graded and written to ``out_dir``."""
    job = load_job(run_dir)
    suite, split = suite or job.suite, split or job.eval_split
    out = Path(out_dir) if out_dir is not None else None
    if out is not None:
        check_out_dir(out, overwrite)
    env = _env(job, suite, split, n, seed)
    model, tokenizer = load_trained(run_dir, job)
    rows = conductor_rows(env, chat=job.chat)
    if job.answer_prefix:
        rows = prefixed_rows(rows, tokenizer, job.answer_prefix)
    start = time.perf_counter()
    completions = generate(
        model,
        tokenizer,
        [r["prompt"] for r in rows],
        job.eval.max_new_tokens,
        batch_size or job.eval.batch_size,
        job.eval.repetition_penalty,
        bool(job.eval.autocast_bf16),
    )
    generation_s = time.perf_counter() - start
    scorer = WorkflowScorer(env, max_workers=workers, seed=seed, answer_prefix=job.answer_prefix)
    episodes = scorer.episodes([r["task_id"] for r in rows], completions)
    items = list(env.tasks)  # conductor_rows keeps the env's task order
    lines = []
    for row, text, (_, trajectory, record) in zip(rows, completions, episodes, strict=True):
        call = _call(tokenizer, row["prompt"], text, job, generation_s / len(rows))
        lines.append((trajectory, {**record, "conductor": [call]}))
    label = f"conductor:grpo:{Path(run_dir)}"
    result = record_episodes(
        out,
        items,
        lines,
        pool=env.pool,
        wall_s=time.perf_counter() - start,
        policy=label,
        policy_name=label,
        suite=suite,
        split=split,
        seed=seed,
        mode="workflow",
        backends=(*env.pool.backends(), "transformers"),
        max_steps=env.config.max_steps,
        lam=env.config.workflow_lam,
        available=job.available,
    )
    log.info("%s on %s/%s: accuracy %.3f over %d items", label, suite, split, result.accuracy, result.n)
    return result


def _call(tokenizer: Any, prompt: Any, text: str, job: GRPOJob, latency_s: float) -> dict[str, Any]:
    """The eval line's record of one conductor generation (the batch's time shared out per item)."""
    if not isinstance(prompt, str):
        prompt = tokenizer.apply_chat_template(list(prompt), tokenize=False, add_generation_prompt=True)
    completion_tokens = len(tokenizer(text, add_special_tokens=False)["input_ids"])
    return {
        "depth": 0,
        "text": job.answer_prefix + text,
        "prompt_tokens": len(tokenizer(prompt, add_special_tokens=False)["input_ids"]),
        "completion_tokens": completion_tokens,
        "latency_s": latency_s,
        "cost_usd": 0.0,
        "flops": 0.0,
        "cached": False,
        "truncated": completion_tokens >= job.eval.max_new_tokens,
        "queue_s": 0.0,
    }
