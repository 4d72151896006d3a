"""Evaluate a finished conductor GRPO run on any items, as an ordinary eval run directory.

The trained conductor plans with its run's own settings (``config.json``): the prompt version, the
chat layout, the answer prefix, the agents it was offered, the stop after ``access_list`` and the
held-out generation settings. The output directory holds ``results.json`` and ``trajectories.jsonl``
in ``puppeteer eval``'s format (each line with the conductor's text and its planning rounds), so
``puppeteer ab``, ``puppeteer graph`` and :func:`puppeteer.analytics.load` take it like any run::

    puppeteer eval --policy conductor:grpo:runs/grpo --pool sim-paper --suite arith --n 400 --out runs/ab/g
    puppeteer ab runs/ab/g runs/ab/puppeteer-arith --pool sim-paper --suite arith

Items and reset seeds are :func:`puppeteer.evaluation.evaluate.evaluate_policy`'s (the first ``n`` of the
split in the ``seed`` order, ``item_seed(seed, task id)``), so the episodes pair item for item with
any other policy evaluated on the same pool, suite, split and seed.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from puppeteer.envs.lam_range import LamRange
from puppeteer.envs.rollout import conductor_record, run_episode
from puppeteer.errors import UserError
from puppeteer.evaluation.evaluate import evaluate
from puppeteer.evaluation.results import EvalResult
from puppeteer.evaluation.settings import EvalSettings
from puppeteer.integrations.trl import conductor_rows, prefixed_rows
from puppeteer.policies.conductor import GRPO_RUN_PREFIX
from puppeteer.policies.protocol import EpisodeRecord, EpisodeSettings
from puppeteer.train.conductor_generation import install_access_list_stop
from puppeteer.train.conductor_model import Loaded, load_conductor_model
from puppeteer.train.extras import require
from puppeteer.train.grpo.config import GRPOJob
from puppeteer.train.grpo.heldout import generate
from puppeteer.train.grpo.warm_start import WARM_START_DIR
from puppeteer.train.plan_constraint import install_plan_constraint
from puppeteer.types import Completion, ConductorAction, TrainItems

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from puppeteer.agents.pool import Pool
    from puppeteer.backends.base import Backend
    from puppeteer.envs.build import EnvConfig
    from puppeteer.envs.env import ConductorEnv
    from puppeteer.types import Task

log = logging.getLogger(__name__)


def load_job(run_dir: str | Path) -> GRPOJob:
    """The :class:`GRPOJob` a run was trained with (its ``config.json``); for ``RUN/warm_start`` (the
    conductor after its warm start, before GRPO), the run's."""
    path = Path(run_dir) / "config.json"
    if not path.is_file() and Path(run_dir).name == WARM_START_DIR:
        path = Path(run_dir).parent / "config.json"
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
        require("peft", f"{run_dir} (LoRA adapters)", "grpo")
        from peft import PeftModel

        base, tokenizer = load_conductor_model(job.model)
        model = PeftModel.from_pretrained(base, str(final)).merge_and_unload()
    else:
        model, tokenizer = load_conductor_model(dataclasses.replace(job.model, id=str(final), source="hf"))
    if job.stop_after_access_list:
        install_access_list_stop(model, tokenizer)
    return model, tokenizer


class TrainedConductor:
    """A finished conductor GRPO run as a :class:`~puppeteer.policies.protocol.Policy` (spec
    ``conductor:grpo:RUN``): it plans with its run's prompt, chat layout, answer prefix and agents, and
    writes every item's plan in batches once the env is ready (:meth:`start`); episodes run the plans."""

    model_backends = ("transformers",)

    def __init__(
        self, run_dir: str | Path, batch_size: int | None = None, loaded: Loaded | None = None
    ) -> None:
        self.run_dir = Path(run_dir)
        self.job = load_job(run_dir)
        self.name = f"{GRPO_RUN_PREFIX}{self.run_dir}"
        self.batch_size = batch_size or self.job.eval.batch_size
        self._loaded = loaded
        # task id -> (completion, its call record, the agent ids its prompt offered)
        self._plans: dict[str, tuple[str, dict[str, Any], list[int]]] = {}

    def configure(
        self, settings: EpisodeSettings, tasks: Sequence[Task], seeds: Sequence[int], pool: Pool
    ) -> EnvConfig:
        """The run's env settings; the pool must be the run's (its prompt lists the agents by id).

        A run trained over a price range (``workflow_lam_range``) plans at the caller's ``lam``,
        clamped into the range, stated in every prompt; a fixed-price run keeps its own."""
        if pool.name != self.job.pool:
            raise UserError(
                f"{self.name} was trained on pool {self.job.pool!r}: evaluate it there, not {pool.name!r}"
            )
        config = self.job.env_config(pool, training=False)
        price = LamRange.of(self.job.workflow_lam_range)
        if price is None:
            return config
        return dataclasses.replace(
            config, lam_range=None, workflow_lam=price.clamp(settings.lam), price_in_prompt=True
        )

    def start(self, env: ConductorEnv, shared: Backend | None, cache: str | Path | None = None) -> None:
        """Greedy plans for every item of ``env`` not planned yet, in batches."""
        todo = [t for t in env.tasks if t.id not in self._plans]
        if not todo:
            return
        if self._loaded is None:
            self._loaded = load_trained(self.run_dir, self.job)
        model, tokenizer = self._loaded
        job = self.job
        if job.constrained:  # the run's plans were sampled under their items' grammars: so are these
            install_plan_constraint(model, job.plan_grammars(tokenizer, model, [env]))
        rows = conductor_rows(env, todo, chat=self.job.chat, seed=job.seed)
        if self.job.answer_prefix:
            rows = prefixed_rows(rows, tokenizer, self.job.answer_prefix)
        t0 = time.perf_counter()
        ev = self.job.eval
        texts = generate(
            model,
            tokenizer,
            [r["prompt"] for r in rows],
            ev.max_new_tokens,
            self.batch_size,
            ev.repetition_penalty,
            bool(ev.autocast_bf16),
        )
        per_item = (time.perf_counter() - t0) / len(rows)
        for row, text in zip(rows, texts, strict=True):
            call = _call(tokenizer, row["prompt"], text, self.job, per_item)
            self._plans[row["task_id"]] = (text, call, row["available"])

    def episode(
        self, env: ConductorEnv, *, index: int, seed: int, options: Mapping[str, Any] | None = None
    ) -> EpisodeRecord:
        options = dict(options or {})
        if options.get("available") and tuple(options["available"]) != tuple(self.job.available or ()):
            raise UserError(f"{self.name} plans for the agents it was trained with: {self.job.available}")
        text, call, offered = self._plans[env.tasks[index].id]
        if self.job.k_available is not None:  # each item's own subset, the one its prompt listed
            options["available"] = offered
        plan = self.job.answer_prefix + text
        generation = Completion(
            plan, call["prompt_tokens"], call["completion_tokens"], None, 0.0, call["latency_s"], "conductor"
        )
        action = ConductorAction(plan, generation)  # the conductor's tokens are in the episode's cost
        options = {"task_index": index, **options}
        end = run_episode(env, lambda _obs, _info: action, seed=seed, options=options)
        return end.trajectory, conductor_record(env, end.info, [call])

    @property
    def train_items(self) -> TrainItems:
        """The run's training items (``n_train`` as its results recorded it, else as configured)."""
        n = self.job.n_train
        with contextlib.suppress(OSError, ValueError, AttributeError):
            n = json.loads((self.run_dir / "results.json").read_text()).get("n_train", n)
        return TrainItems(self.job.suite, self.job.train_split, n)

    def fork(self) -> TrainedConductor:
        return self  # the plans were written in start(); episodes only read them


def grpo_conductor(arg: str, pool: Pool, max_steps: int) -> TrainedConductor:
    """The registry's factory for ``conductor:grpo:RUN``."""
    return TrainedConductor(arg)


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
    policy = TrainedConductor(run_dir, batch_size)
    job = policy.job
    settings = EvalSettings(
        pool=job.pool,
        suite=suite or job.suite,
        split=split or job.eval_split,
        n=n,
        seed=seed,
        out_dir=out_dir,
        cache=job.cache,
        overwrite=overwrite,
        concurrency=workers,
        progress=False,
    )
    result = evaluate(policy, settings)
    log.info(
        "%s on %s/%s: accuracy %.3f over %d items",
        policy.name,
        result.suite,
        result.split,
        result.accuracy,
        result.n,
    )
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
