"""The conductor's warm start: the best plan per training question, then supervised fine-tuning on it.

A small untrained conductor spends GRPO's samples on plans that do not parse or that name one agent
for everything (docs/conductor-grpo.md). The warm start first gives it plans that are known to be good:

1. **search**: every plan of a declared space (default :func:`~puppeteer.policies.plan_space.plan_specs`
   over the agents the prompt offers: singles, ordered pairs, votes of three, and under
   ``final_answer=cascade`` each ordered pair as a cascade on each trigger) is written as the conductor
   would write it (:func:`plan_text`) and executed on every training question in the run's own
   workflow-mode env (the GRPO reward: :class:`~puppeteer.integrations.trl.WorkflowScorer`), once per
   reset seed ``0 .. draws-1``;
2. **keep**: each question keeps the plan of highest mean reward over the draws; ties go to the plan
   with the highest mean reward on the question's kind, then to fewer steps, then to the spec's name
   (:func:`keep_best`). The kept plans are written as JSON lines (:class:`KeptPlan`), and read back
   instead of searching again when the file exists (several seeds can share one search);
3. **fine-tune**: ``trl.SFTTrainer`` on (the GRPO prompt, the kept plan) pairs, the loss on the plan
   only, checkpointed and resumed like GRPO; the result is saved under ``warm_start/final`` and GRPO
   goes on from it.

Each kept plan's ``reward`` is what the search recorded; scoring its text again on the same draws gives
the same figure (``tests/train/test_warm_start.py``).
"""

from __future__ import annotations

import json
import logging
from collections import defaultdict
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import numpy as np

from puppeteer.backends.replay import ReplayMiss
from puppeteer.envs.workflow import CASCADE_TRIGGERS, format_workflow
from puppeteer.integrations.trl import WorkflowScorer
from puppeteer.policies.plan_space import plan_specs
from puppeteer.policies.registry import make_policy
from puppeteer.types import Workflow

if TYPE_CHECKING:
    from puppeteer.agents.pool import Pool
    from puppeteer.envs.env import ConductorEnv
    from puppeteer.types import Task

log = logging.getLogger(__name__)

WARM_START_DIR = "warm_start"  # under a run: plans.jsonl, the fine-tune's checkpoints and final/


@dataclass(frozen=True)
class WarmStartSpec:
    """What the warm start searches and how it fine-tunes (the ``warm_start`` section of a conductor run)."""

    plans: tuple[str, ...] = ()  # plan specs to search; () = plan_specs over the agents on offer
    draws: int = 3  # reset seeds each (question, plan) is scored on; the kept plan has the best mean
    subtask: str = "Solve the question."  # every step's subtask in a kept plan
    keep: str = "kind"  # kind: the best plan of the question's kind | question: the best on the question
    epochs: float = 2.0
    learning_rate: float = 5.0e-5
    batch_size: int = 4  # examples a forward pass
    accumulation: int = 1  # passes an optimizer step (batch_size x accumulation examples a step)
    save_steps: int = 5
    plans_file: str | None = None  # the kept plans (JSON lines); None: <run>/warm_start/plans.jsonl

    def __post_init__(self) -> None:
        if self.draws < 1:
            raise ValueError(f"warm_start.draws must be >= 1, got {self.draws}")
        if self.keep not in KEEP_BY:
            raise ValueError(f"warm_start.keep must be one of {', '.join(KEEP_BY)}, got {self.keep!r}")
        if self.epochs <= 0 or self.learning_rate <= 0 or self.batch_size < 1 or self.accumulation < 1:
            raise ValueError("warm_start.epochs, learning_rate must be > 0, batch_size, accumulation >= 1")

    @classmethod
    def from_mapping(cls, cfg: Mapping[str, Any]) -> WarmStartSpec:
        known = {k: cfg[k] for k in cls.__dataclass_fields__ if cfg.get(k) is not None}
        if "plans" in known:
            known["plans"] = tuple(str(p) for p in known["plans"])
        return cls(**known)


@dataclass(frozen=True)
class KeptPlan:
    """The plan a training question keeps: its spec, the text the conductor learns, its mean reward."""

    task_id: str
    kind: str
    plan: str  # the policy spec it came from (single:A, chain:A,B, vote:A,B,C)
    text: str  # the whole plan as the conductor writes it (format_workflow, with its final line)
    reward: float  # the mean reward over ``draws``
    draws: tuple[int, ...]
    keep: str = "kind"  # how it was kept (:func:`keep_best`'s ``by``)


def plan_workflow(spec: str, task: Task, pool: Pool, subtask: str) -> Workflow:
    """The plan ``spec`` for ``task`` as a conductor writes it: every step's subtask ``subtask``, and
    ``final = 'vote'`` where the plan votes (None, no line: the last step's answer)."""
    return _written(make_policy(spec, pool), task, pool, subtask)


def _written(policy: Any, task: Task, pool: Pool, subtask: str) -> Workflow:
    workflow = policy.plan(task, pool, np.random.default_rng(0))
    final = workflow.final  # a cascade's plan names its own (cascade:TRIGGER)
    if final is None and getattr(policy, "aggregate", "last") != "last":
        final = policy.aggregate
    return Workflow(workflow.model_id, (subtask,) * len(workflow), workflow.access_list, final)


def plan_text(spec: str, task: Task, pool: Pool, subtask: str) -> str:
    """:func:`plan_workflow` as text (:func:`~puppeteer.envs.workflow.format_workflow`)."""
    return format_workflow(plan_workflow(spec, task, pool, subtask))


def score_plans(
    env: ConductorEnv,
    rows: Sequence[Mapping[str, Any]],
    specs: Sequence[str],
    subtask: str,
    draws: int,
    max_workers: int = 8,
) -> dict[str, dict[str, float | None]]:
    """Mean reward over ``draws`` reset seeds of each plan on each row's question (spec -> task id ->
    reward); a plan naming an agent that a row's prompt does not offer is not scored there, and one
    that needs a call the pool's outcome table does not hold (strict replay) scores None there."""
    from tqdm.auto import tqdm

    tasks = {t.id: t for t in env.tasks}
    totals: dict[str, dict[str, float | None]] = defaultdict(dict)
    scorers = [WorkflowScorer(env, max_workers=max_workers, seed=d) for d in range(draws)]
    for spec in tqdm(specs, desc="warm start: plans searched", unit="plan"):
        policy = make_policy(spec, env.pool)  # built once a plan, written for each question
        plans = {r["task_id"]: _written(policy, tasks[r["task_id"]], env.pool, subtask) for r in rows}
        texts = {task_id: format_workflow(w) for task_id, w in plans.items()}
        usable = [r for r in rows if set(plans[r["task_id"]].model_id) <= set(r["available"])]
        if not usable:
            continue
        sums = np.zeros(len(usable))
        for scorer in scorers:
            sums += _rewards(scorer, usable, texts)
        for r, total in zip(usable, sums, strict=True):
            totals[spec][r["task_id"]] = float(total / draws) if np.isfinite(total) else None
    return dict(totals)


def _rewards(
    scorer: WorkflowScorer, rows: Sequence[Mapping[str, Any]], texts: Mapping[str, str]
) -> list[float]:
    """Each row's reward for its plan text, the rows concurrently; NaN where a strict replay table does
    not hold one of the plan's calls (the world cannot say what the plan would get on that question)."""

    def one(row: Mapping[str, Any]) -> float:
        task_id = row["task_id"]
        try:
            return scorer.score_one(task_id, texts[task_id], row["available"], row["lam"]).reward
        except ReplayMiss:
            return float("nan")

    with ThreadPoolExecutor(max_workers=min(scorer.max_workers, len(rows))) as pool:
        return list(pool.map(one, rows))


KEEP_BY = ("kind", "question")


def keep_best(
    rewards: Mapping[str, Mapping[str, float | None]], kinds: Mapping[str, str], by: str = "kind"
) -> dict[str, str]:
    """The plan each task id keeps (``rewards``: spec -> task id -> mean reward; None where the plan
    needs a call a strict replay table does not hold).

    ``by="kind"``: every question keeps the plan of highest mean reward over its kind's questions (ties
    to fewer steps, then the spec's name). ``by="question"``: the plan of highest reward on the question
    itself; ties to the plan with the highest mean reward over the question's kind, then fewer steps,
    then the name. A plan the table cannot answer on some question of a kind is kept for none of that
    kind's questions: where it is answerable depends on its own answers (a cascade's second call only
    runs when its trigger fires), so its mean over the rest would be chosen from the easy questions."""
    if by not in KEEP_BY:
        raise ValueError(f"warm_start.keep must be one of {', '.join(KEEP_BY)}, got {by!r}")
    kind_mean: dict[tuple[str, str], float] = {}
    for spec, row in rewards.items():
        by_kind: dict[str, list[float | None]] = defaultdict(list)
        for task_id, value in row.items():
            by_kind[kinds[task_id]].append(value)
        for kind, values in by_kind.items():
            if None not in values:
                kind_mean[spec, kind] = float(np.mean(values))
    own = 0.0 if by == "kind" else 1.0  # the weight of the question's own reward in the choice
    kept = {}
    for task_id, kind in kinds.items():
        scored = [
            (-own * row[task_id], -kind_mean[spec, kind], spec.count(",") + 1, spec)
            for spec, row in rewards.items()
            if task_id in row and (spec, kind) in kind_mean
        ]
        if scored:
            kept[task_id] = min(scored)[3]
    return kept


def searched_plans(
    env: ConductorEnv, rows: Sequence[Mapping[str, Any]], spec: WarmStartSpec
) -> tuple[str, ...]:
    """``spec.plans``, or the declared space over every agent some row's prompt offers (with the
    cascades of every ordered pair where the env offers cascades)."""
    offered = sorted({i for r in rows for i in r["available"]})
    triggers = CASCADE_TRIGGERS if env.config.final_answer == "cascade" else ()
    return spec.plans or tuple(plan_specs([env.pool.agent(i).name for i in offered], cascades=triggers))


def search_setting(
    env: ConductorEnv, rows: Sequence[Mapping[str, Any]], spec: WarmStartSpec, specs: Sequence[str]
) -> dict[str, Any]:
    """What the scores depend on: the env's settings and pool, the questions with their agents and
    prices, the plans, the subtask and the draws (a cached score is used only in the same setting)."""
    config = json.loads(json.dumps(asdict(env.config), default=str))
    questions = [[r["task_id"], list(r["available"]), r["lam"]] for r in rows]
    return {
        "pool": env.pool.name,
        "env": config,
        "questions": sorted(questions),
        "plans": sorted(specs),
        "subtask": spec.subtask,
        "draws": spec.draws,
    }


def search(
    env: ConductorEnv,
    rows: Sequence[Mapping[str, Any]],
    spec: WarmStartSpec,
    max_workers: int = 8,
    scores_file: Path | None = None,
) -> list[KeptPlan]:
    """Score the plan space on ``rows`` (the run's conductor rows) and keep a plan per question
    (:func:`keep_best`). ``scores_file``: every (plan, question) mean reward, read when it was scored in
    this setting (:func:`search_setting`), else written (so the choice can be made again without
    executing the plans again)."""
    pool = env.pool
    specs = searched_plans(env, rows, spec)
    setting = search_setting(env, rows, spec, specs)
    rewards: dict[str, dict[str, float | None]] | None = None
    if scores_file is not None and scores_file.is_file():
        cached = json.loads(scores_file.read_text())
        if cached.get("setting") == setting:
            rewards = cached["rewards"]
        else:
            log.warning("warm start: %s was scored in another setting; scoring again", scores_file)
    if rewards is None:
        rewards = score_plans(env, rows, specs, spec.subtask, spec.draws, max_workers)
        if scores_file is not None:
            scores_file.parent.mkdir(parents=True, exist_ok=True)
            scores_file.write_text(json.dumps({"setting": setting, "rewards": rewards}))
    tasks = {t.id: t for t in env.tasks}
    kinds = {r["task_id"]: tasks[r["task_id"]].domain for r in rows}
    chosen = keep_best(rewards, kinds, spec.keep)
    draws = tuple(range(spec.draws))
    return [
        KeptPlan(
            task_id,
            kinds[task_id],
            plan,
            plan_text(plan, tasks[task_id], pool, spec.subtask),
            cast(float, rewards[plan][task_id]),  # never None: keep_best keeps scored plans only
            draws,
            spec.keep,
        )
        for task_id, plan in chosen.items()
    ]


def write_plans(path: Path, kept: Sequence[KeptPlan]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text("".join(json.dumps(asdict(k)) + "\n" for k in kept))
    tmp.replace(path)


def read_plans(path: Path) -> list[KeptPlan]:
    out = []
    for line in path.read_text().splitlines():
        row = json.loads(line)
        out.append(KeptPlan(**{**row, "draws": tuple(row["draws"])}))
    return out


def kept_plans(
    env: ConductorEnv,
    rows: Sequence[Mapping[str, Any]],
    spec: WarmStartSpec,
    path: Path,
    max_workers: int = 8,
) -> list[KeptPlan]:
    """The kept plans of ``path`` when it exists for the same questions, keep and scores (the scores
    beside it, ``<path>.scores.json``, in this run's setting), else chosen again and written."""
    wanted = {r["task_id"] for r in rows}
    scores = path.with_suffix(".scores.json")
    if path.is_file() and scores.is_file():
        kept = read_plans(path)
        setting = search_setting(env, rows, spec, searched_plans(env, rows, spec))
        same = json.loads(scores.read_text()).get("setting") == setting
        if same and {k.task_id for k in kept} == wanted and {k.keep for k in kept} == {spec.keep}:
            log.info("warm start: %d kept plans read from %s", len(kept), path)
            return kept
        log.warning("warm start: %s was kept in another setting; choosing again", path)
    kept = search(env, rows, spec, max_workers, scores)
    write_plans(path, kept)
    return kept


def summarize_kept(kept: Sequence[KeptPlan]) -> dict[str, Any]:
    """How many questions keep each plan, per kind, and the kept plans' mean reward."""
    plans: dict[str, int] = defaultdict(int)
    by_kind: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    for k in kept:
        plans[k.plan] += 1
        by_kind[k.kind][k.plan] += 1
    return {
        "questions": len(kept),
        "mean_reward": float(np.mean([k.reward for k in kept])) if kept else 0.0,
        "plans": dict(sorted(plans.items(), key=lambda kv: (-kv[1], kv[0]))),
        "by_kind": {
            kind: dict(sorted(c.items(), key=lambda kv: (-kv[1], kv[0]))) for kind, c in by_kind.items()
        },
    }


def sft_examples(
    kept: Sequence[KeptPlan], prompts: Mapping[str, str], answer_prefix: str, eos: str
) -> list[dict[str, str]]:
    """(prompt, completion) rows: the GRPO prompt of each question and its kept plan after the prompt's
    ``answer_prefix``, ended with the tokenizer's end of sequence."""
    rows = []
    for k in kept:
        if not k.text.startswith(answer_prefix):
            raise ValueError(f"plan {k.text[:40]!r} does not start with the answer prefix {answer_prefix!r}")
        rows.append({"prompt": prompts[k.task_id], "completion": k.text[len(answer_prefix) :] + eos})
    return rows


def fine_tune(
    model: Any,
    tokenizer: Any,
    examples: Sequence[Mapping[str, str]],
    spec: WarmStartSpec,
    out_dir: Path,
    seed: int = 0,
) -> Any:
    """``trl.SFTTrainer`` on ``examples`` (loss on the completions only); resumes from the latest
    checkpoint under ``out_dir/checkpoints`` and saves the model under ``out_dir/final``. When
    ``out_dir/final`` exists already, its weights are loaded instead of training again."""
    import datasets
    from transformers.trainer_utils import get_last_checkpoint
    from trl import SFTConfig, SFTTrainer

    final = out_dir / "final"
    if (final / "config.json").is_file():
        from puppeteer.backends.hf_models import load_causal_lm

        log.info("warm start: fine-tuned model read from %s", final)
        loaded, _ = load_causal_lm(final, model.dtype)
        return loaded
    checkpoints = out_dir / "checkpoints"
    args = SFTConfig(
        output_dir=str(checkpoints),
        num_train_epochs=spec.epochs,
        learning_rate=spec.learning_rate,
        per_device_train_batch_size=spec.batch_size,
        gradient_accumulation_steps=spec.accumulation,
        lr_scheduler_type="constant_with_warmup",
        warmup_steps=2,
        save_steps=spec.save_steps,
        save_total_limit=2,
        logging_steps=1,
        report_to=[],
        seed=seed,
        completion_only_loss=True,
        max_length=None,
        activation_checkpointing=False,  # on, it turns off the KV cache that GRPO's shared prefix needs
        use_cpu=not _cuda(),
    )
    trainer = SFTTrainer(
        model=model,
        args=args,
        train_dataset=datasets.Dataset.from_list([dict(e) for e in examples]),
        processing_class=tokenizer,
    )
    last = get_last_checkpoint(str(checkpoints)) if checkpoints.is_dir() else None
    trainer.train(resume_from_checkpoint=last)
    trainer.model.config.use_cache = True
    trainer.save_model(str(final))
    tokenizer.save_pretrained(str(final))
    (out_dir / "sft_log.json").write_text(json.dumps(trainer.state.log_history, indent=2))
    return trainer.model


def _cuda() -> bool:
    import torch

    return bool(torch.cuda.is_available())


__all__ = [
    "KEEP_BY",
    "WARM_START_DIR",
    "KeptPlan",
    "WarmStartSpec",
    "fine_tune",
    "keep_best",
    "kept_plans",
    "plan_text",
    "plan_workflow",
    "read_plans",
    "score_plans",
    "search",
    "search_setting",
    "searched_plans",
    "sft_examples",
    "summarize_kept",
    "write_plans",
]
