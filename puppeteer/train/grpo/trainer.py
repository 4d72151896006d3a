"""GRPO training of the conductor (plan-all-at-once) with ``trl.GRPOTrainer``.

One job, top to bottom: build a workflow-mode env on the train split, load the conductor LM
(:mod:`puppeteer.train.conductor_model`), evaluate it greedily on held-out items, train with
:class:`~puppeteer.integrations.trl.ConductorReward` (every sampled workflow executed in
``Conductor-v0``, a batch concurrently), checkpoint (exact resume through the HF Trainer state),
evaluate again, and write ``results.json``, ``metrics.jsonl`` and ``learning_curve.png``.
The hyperparameters under ``grpo`` go to :class:`trl.GRPOConfig` unchanged.
"""

from __future__ import annotations

import json
import logging
import resource
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from puppeteer.envs.env import ConductorEnv
from puppeteer.integrations.trl import (
    ConductorReward,
    conductor_dataset,
    conductor_rows,
    prefixed_rows,
    prompt_token_counter,
)
from puppeteer.train.conductor_generation import install_access_list_stop
from puppeteer.train.conductor_model import load_conductor_model
from puppeteer.train.format_reward import FormatReward
from puppeteer.train.logging import JsonlLogger, MetricLogger, MultiLogger, WandbLogger
from puppeteer.train.plan_constraint import install_plan_constraint
from puppeteer.train.shared_prefix import install_shared_prefix

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase, TrainerCallback
from puppeteer.train.grpo.callbacks import (
    OnLog,
    load_if_finished,
    metric_forwarder,
    resume_from,
    time_budget,
)
from puppeteer.train.grpo.config import GRPOJob, grpo_config
from puppeteer.train.grpo.curve import conductor_curve
from puppeteer.train.grpo.heldout import evaluate_conductor, paired_heldout
from puppeteer.train.grpo.warm_start import (
    WARM_START_DIR,
    fine_tune,
    kept_plans,
    sft_examples,
    summarize_kept,
)

log = logging.getLogger(__name__)


def train_dataset(job: GRPOJob, env: ConductorEnv, tokenizer: PreTrainedTokenizerBase) -> Any:
    """The env's conductor prompts; with ``answer_prefix``, as text whose assistant turn is opened."""
    if not job.answer_prefix:
        return conductor_dataset(env, chat=job.chat, seed=job.seed)
    import datasets

    if not job.chat:
        raise ValueError("answer_prefix needs chat=true (it opens the assistant turn of the chat template)")
    rows = prefixed_rows(conductor_rows(env, chat=True, seed=job.seed), tokenizer, job.answer_prefix)
    return datasets.Dataset.from_list(rows)


def warm_start(
    job: GRPOJob, model: Any, tokenizer: Any, env: ConductorEnv, run: Path
) -> tuple[Any, dict[str, Any] | None]:
    """The conductor fine-tuned on the best plan per training question (:mod:`.warm_start`), from the
    run's ``warm_start/`` when it is there, and the kept plans' summary; the model unchanged and None
    when the job has no warm start."""
    spec = job.warm_start
    if spec is None:
        return model, None
    out = run / WARM_START_DIR
    rows = conductor_rows(env, chat=job.chat, seed=job.seed)
    kept = kept_plans(env, rows, spec, Path(spec.plans_file or out / "plans.jsonl"), job.reward_workers)
    texts = prefixed_rows(rows, tokenizer, job.answer_prefix) if job.chat else rows
    prompts = {r["task_id"]: str(r["prompt"]) for r in texts}
    examples = sft_examples(kept, prompts, job.answer_prefix, tokenizer.eos_token or "")
    summary = summarize_kept(kept)
    out.mkdir(parents=True, exist_ok=True)
    (out / "summary.json").write_text(json.dumps(summary, indent=2))
    log.info("warm start: %d kept plans, %d distinct", len(kept), len(summary["plans"]))
    return fine_tune(model, tokenizer, examples, spec, out, job.seed), summary


def _run_facts(
    job: GRPOJob, label: str, train_env: ConductorEnv, eval_env: ConductorEnv, warm: dict[str, Any] | None
) -> dict[str, Any]:
    """What every conductor run's ``results.json`` states about the run itself."""
    return {
        "track": "conductor",
        "backend": label,
        "model": job.model.id,
        "suite": job.suite,
        "pool": train_env.pool.name,
        "eval_split": job.eval_split,
        "n_train": len(train_env.tasks),
        "n_eval": len(eval_env.tasks),
        "seed": job.seed,
        "warm_start": warm,
    }


def _warm_start_only(
    model: Any, tokenizer: Any, run: Path, facts: dict[str, Any], before: Any, wall: float
) -> dict[str, Any]:
    """``grpo.max_steps=0`` with a warm start: the fine-tuned conductor is saved as ``final/`` (so
    ``conductor:grpo:RUN`` plans with it) and its held-out figures are the run's."""
    model.save_pretrained(str(run / "final"))
    tokenizer.save_pretrained(str(run / "final"))
    results = {
        **facts,
        "steps": 0,
        "heldout_before": before,
        "heldout_after": before,
        "wall_s": wall,
        "peak_rss_mb": _peak_rss_mb(),
    }
    (run / "results.json").write_text(json.dumps(results, indent=2, default=str))
    return results


def _peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def backend_label(job: GRPOJob, env: ConductorEnv) -> str:
    import torch

    device = "GPU" if torch.cuda.is_available() else "CPU"
    return f"conductor = transformers on {device} ({job.model.id}), workers = {','.join(env.pool.backends())}"


def run_conductor_training(
    cfg: Mapping[str, Any],
    run_dir: str | Path,
    on_log: OnLog | None = None,
    extra_reward_funcs: Sequence[Callable[..., list[float]]] = (),
    callbacks: Sequence[TrainerCallback] = (),
) -> dict[str, Any]:
    """Train the conductor with GRPO; write ``results.json`` (before/after held-out), curves and the model.

    ``extra_reward_funcs`` are added to the conductor reward (trl sums them; e.g. a format bonus);
    ``callbacks`` are extra ``transformers.TrainerCallback``s.
    """
    from trl import GRPOTrainer

    from puppeteer.train.grpo.shared_prompt import SharedPromptGRPOTrainer

    job = GRPOJob.from_mapping(cfg)
    run = Path(run_dir)
    run.mkdir(parents=True, exist_ok=True)
    (run / "config.json").write_text(json.dumps(cfg, indent=2, default=str))
    start = time.perf_counter()
    train_env = job.env(job.train_split, job.n_train)
    eval_env = job.env(job.eval_split, job.n_eval, pool=train_env.pool, training=False)
    model, tokenizer = load_conductor_model(job.model)
    model, warm = warm_start(job, model, tokenizer, train_env, run)
    if job.stop_after_access_list:
        install_access_list_stop(model, tokenizer)
    if job.share_prompt_prefix:
        install_shared_prefix(model)
    if job.constrained:
        install_plan_constraint(model, job.plan_grammars(tokenizer, model, (train_env, eval_env)))
    label = backend_label(job, train_env)
    log.info(
        "conductor GRPO: %s; %d train items, %d held-out", label, len(train_env.tasks), len(eval_env.tasks)
    )

    before_path = run / "heldout_before.json"
    before: dict[str, Any] | None = None
    if before_path.is_file():
        before = json.loads(before_path.read_text())
    elif job.eval.before:
        before = evaluate_conductor(
            model,
            tokenizer,
            eval_env,
            job.eval,
            job.chat,
            job.seed,
            run / "heldout_before.jsonl",
            job.reward_workers,
            job.answer_prefix,
        )
        before_path.write_text(json.dumps(before, indent=2))

    loggers: list[MetricLogger] = [JsonlLogger(run / "metrics.jsonl")]
    wb = cfg.get("wandb") or {}
    if wb.get("enabled"):
        loggers.append(
            WandbLogger(run, wb.get("project", "puppeteer"), cfg, mode=wb.get("mode"), name="conductor")
        )
    logger = MultiLogger(*loggers)
    if before is not None:
        logger.log({f"eval/{k}": v for k, v in before.items() if isinstance(v, int | float)}, step=0)

    if job.warm_start is not None and int(job.grpo.get("max_steps", -1)) == 0:
        logger.close()  # the warm start alone: its model is the run's final conductor
        facts = _run_facts(job, label, train_env, eval_env, warm)
        return _warm_start_only(model, tokenizer, run, facts, before, time.perf_counter() - start)
    checkpoints = run / "checkpoints"
    args = grpo_config(job, checkpoints)
    shaping = []
    if job.format_reward_weight > 0:
        shaping = [FormatReward(job.answer_prefix, job.workflow_max_steps)]
        args.reward_weights = [1.0, job.format_reward_weight] + [1.0] * len(extra_reward_funcs)
    trainer_class = SharedPromptGRPOTrainer if job.share_prompt_prefix else GRPOTrainer
    trainer = trainer_class(
        model=model,
        reward_funcs=[
            ConductorReward(
                train_env,
                max_workers=job.reward_workers,
                seed=job.seed,
                answer_prefix=job.answer_prefix,
                record=run / "samples.jsonl",
                prompt_tokens=prompt_token_counter(tokenizer),  # the conductor's tokens are in the cost
            ),
            *shaping,
            *extra_reward_funcs,
        ],
        args=args,
        train_dataset=train_dataset(job, train_env, tokenizer),
        processing_class=tokenizer,
        peft_config=job.lora.peft_config() if job.lora else None,
        callbacks=[
            metric_forwarder(logger, on_log),
            *([time_budget(job.time_budget_s)] if job.time_budget_s else []),
            *callbacks,
        ],
    )
    resumed = resume_from(job, checkpoints)
    train_start = time.perf_counter()
    try:
        if not load_if_finished(trainer, resumed):  # started again after it finished: no step more
            trainer.train(resume_from_checkpoint=resumed)
        train_wall = time.perf_counter() - train_start
        trainer.save_model(str(run / "final"))
        tokenizer.save_pretrained(str(run / "final"))
        after = evaluate_conductor(
            trainer.model,
            tokenizer,
            eval_env,
            job.eval,
            job.chat,
            job.seed,
            run / "heldout_after.jsonl",
            job.reward_workers,
            job.answer_prefix,
        )
        logger.log(
            {f"eval/{k}": v for k, v in after.items() if isinstance(v, int | float)},
            step=int(trainer.state.global_step),
        )
    finally:
        logger.close()
    history = [dict(h) for h in trainer.state.log_history]
    results = {
        **_run_facts(job, label, train_env, eval_env, warm),
        "steps": int(trainer.state.global_step),
        "resumed_from": resumed,
        "heldout_before": before,
        "heldout_after": after,
        "heldout_paired": paired_heldout(run / "heldout_before.jsonl", run / "heldout_after.jsonl"),
        "wall_s": time.perf_counter() - start,
        "train_wall_s": train_wall,
        "peak_rss_mb": _peak_rss_mb(),
        "grpo": {k: v for k, v in dict(job.grpo).items()},
        "lora": job.lora.__dict__ if job.lora else None,
    }
    (run / "results.json").write_text(json.dumps(results, indent=2, default=str))
    (run / "log_history.json").write_text(json.dumps(history, indent=2))
    conductor_curve(
        history, run / "learning_curve.png", f"conductor GRPO on {job.suite} [{label}]", before, after
    )
    return results
