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
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from puppeteer.envs.build import EnvConfig
from puppeteer.envs.env import ConductorEnv
from puppeteer.envs.lam_range import LamRange
from puppeteer.evaluation.stats import wilson_interval
from puppeteer.integrations.trl import (
    ConductorReward,
    WorkflowOutcome,
    WorkflowScorer,
    conductor_dataset,
    conductor_rows,
    prefixed_rows,
    prompt_token_counter,
    summarize,
)
from puppeteer.train.conductor_generation import install_access_list_stop
from puppeteer.train.conductor_model import ModelSpec, load_conductor_model
from puppeteer.train.extras import require
from puppeteer.train.format_reward import FormatReward
from puppeteer.train.logging import JsonlLogger, MetricLogger, MultiLogger, WandbLogger
from puppeteer.train.plan_constraint import PlanGrammars, install_plan_constraint, plan_grammars
from puppeteer.train.shared_prefix import install_shared_prefix
from puppeteer.types import Completion

if TYPE_CHECKING:
    from transformers import PreTrainedModel, PreTrainedTokenizerBase, TrainerCallback

log = logging.getLogger(__name__)

OnLog = Callable[[int, Mapping[str, float]], None]
# trl's own names for the headline numbers, and ours for the reward's components
CURVE_KEYS = ("reward", "conductor/parse_rate", "conductor/accuracy")


@dataclass(frozen=True)
class LoraSpec:
    r: int = 16
    alpha: int = 32
    dropout: float = 0.05
    target_modules: str | tuple[str, ...] = "all-linear"

    def peft_config(self) -> Any:
        require("peft", "lora.enabled=true", "grpo")
        from peft import LoraConfig

        target = self.target_modules if isinstance(self.target_modules, str) else list(self.target_modules)
        return LoraConfig(
            r=self.r,
            lora_alpha=self.alpha,
            lora_dropout=self.dropout,
            target_modules=target,
            task_type="CAUSAL_LM",
        )


@dataclass(frozen=True)
class EvalSpec:
    before: bool = True  # also evaluate the untrained conductor (the "before" of before/after)
    max_new_tokens: int = 256
    batch_size: int = 8
    repetition_penalty: float = 1.0
    # generate under torch.autocast(bfloat16) (fp32 weights); None: as the training does (grpo.bf16 on a CPU)
    autocast_bf16: bool | None = None


@dataclass(frozen=True)
class GRPOJob:
    """Everything one conductor GRPO run needs; built from the Hydra config by :meth:`from_mapping`."""

    model: ModelSpec = field(default_factory=ModelSpec)
    suite: str = "arith"
    pool: str = "sim-paper"
    train_split: str = "train"
    eval_split: str = "test"
    n_train: int | None = None
    n_eval: int | None = None
    chat: bool = False
    workflow_max_steps: int = 5
    workflow_lam: float = 0.0
    # [low, high]: each row (training and held-out) draws its own price of cost, its prompt states it
    # and its reward uses it; ``conductor:grpo:RUN --lam X`` then plans at X
    workflow_lam_range: tuple[float, float] | None = None
    cost_model: str = "tokens"
    # the final answer of a plan (EnvConfig.aggregate): last | vote | plan (the plan's own final line)
    final_answer: str = "last"
    reward_workers: int = 16
    stop_after_access_list: bool = False  # end every completion (sampled and held-out) after access_list
    share_prompt_prefix: bool = True  # run a group's repeated prompt once, in generation and training
    answer_prefix: str = ""  # with chat: the assistant turn starts with this text (e.g. "model_id = [")
    prompt: str = "prompt-v1"  # the conductor prompt config (configs/conductor/<prompt>.yaml)
    available: tuple[str, ...] | None = None  # a fixed subset of the pool's agents (names), every episode
    # each item offers its own random k of the available agents (prompt and reward env agree; the
    # held-out items draw theirs too), never one of ``holdout_subsets`` (agent ids) in training
    k_available: int | None = None
    holdout_subsets: tuple[tuple[int, ...], ...] = ()
    format_reward_weight: float = 0.0  # > 0: add the graded format score (train/format_reward.py)
    # sample and evaluate every plan under its item's grammar (train/plan_constraint.py): all parse
    constrained: bool = False
    time_budget_s: float | None = None  # stop training (checkpoint, then the held-out "after") past this
    lora: LoraSpec | None = None
    eval: EvalSpec = field(default_factory=EvalSpec)
    grpo: Mapping[str, Any] = field(default_factory=dict)
    seed: int = 0
    resume: str = "auto"  # auto (latest checkpoint in the run dir, if any) | never | a checkpoint path
    cache: str | None = None

    @classmethod
    def from_mapping(cls, cfg: Mapping[str, Any]) -> GRPOJob:
        suite = cfg.get("suite") or {}
        suite = {"name": suite} if isinstance(suite, str) else suite
        pool = cfg.get("pool") or {}
        pool_name = pool if isinstance(pool, str) else pool.get("name", "sim-paper")
        lora = dict(cfg.get("lora") or {})
        lora_spec = None
        if lora.pop("enabled", False):
            if isinstance(lora.get("target_modules"), list):
                lora["target_modules"] = tuple(lora["target_modules"])
            lora_spec = LoraSpec(**lora)

        grpo = dict(cfg.get("grpo") or {})
        if "bf16" in grpo:
            grpo["bf16"] = bf16_choice(grpo["bf16"])
        workflow_lam = float(cfg.get("workflow_lam", 0.0))
        lam_range = _lam_range(cfg.get("workflow_lam_range"))
        grpo["scale_rewards"] = scale_rewards_choice(
            grpo.get("scale_rewards"), priced=workflow_lam > 0 or lam_range is not None
        )
        eval_cfg = dict(cfg.get("eval") or {})
        if eval_cfg.get("autocast_bf16") is None:  # held-out generation as the training's (bf16 autocast)
            eval_cfg["autocast_bf16"] = bool(grpo.get("bf16", False))

        def pick(key: str, suite_key: str, default: Any) -> Any:
            value = cfg.get(key)
            return value if value is not None else suite.get(suite_key, default)

        return cls(
            model=ModelSpec.from_mapping(cfg.get("model") or {}),
            suite=str(suite.get("name", "arith")),
            pool=str(pool_name),
            train_split=str(suite.get("train_split", "train")),
            eval_split=str(suite.get("eval_split", "test")),
            n_train=pick("n_train", "n_train", None),
            n_eval=pick("n_eval", "n_eval", None),
            chat=bool(cfg.get("chat", False)),
            workflow_max_steps=int(cfg.get("workflow_max_steps", 5)),
            workflow_lam=workflow_lam,
            workflow_lam_range=lam_range,
            cost_model=str(cfg.get("cost_model", "tokens")),
            final_answer=str(cfg.get("final_answer") or "last"),
            reward_workers=int(cfg.get("reward_workers", 16)),
            stop_after_access_list=bool(cfg.get("stop_after_access_list", False)),
            share_prompt_prefix=bool(cfg.get("share_prompt_prefix", True)),
            answer_prefix=str(cfg.get("answer_prefix") or ""),
            prompt=str(cfg.get("prompt") or "prompt-v1"),
            format_reward_weight=float(cfg.get("format_reward_weight") or 0.0),
            constrained=bool(cfg.get("constrained", False)),
            time_budget_s=float(cfg["time_budget_s"]) if cfg.get("time_budget_s") else None,
            available=tuple(str(a) for a in cfg["available"]) if cfg.get("available") else None,
            k_available=int(cfg["k_available"]) if cfg.get("k_available") else None,
            holdout_subsets=tuple(tuple(int(i) for i in s) for s in cfg.get("holdout_subsets") or ()),
            lora=lora_spec,
            eval=EvalSpec(**eval_cfg),
            grpo=grpo,
            seed=int(cfg.get("seed", 0)),
            resume=str(cfg.get("resume", "auto")),
            cache=cfg.get("cache"),
        )

    def env_config(self, pool: Any, training: bool = True) -> EnvConfig:
        """The workflow-mode env settings of this run (its agents, prompt, step limit and cost model);
        ``training=False``: the held-out env, whose subsets may be the ones kept out of training."""
        unavailable: list[int] = []
        if self.available is not None:
            names = [a.name for a in pool.agents]
            unknown = sorted(set(self.available) - set(names))
            if unknown:
                raise ValueError(f"available names agents not in pool {pool.name}: {unknown}")
            unavailable = [i for i, name in enumerate(names) if name not in self.available]
        return EnvConfig(
            mode="workflow",
            unavailable=tuple(unavailable),
            prompt=self.prompt,
            max_steps=self.workflow_max_steps,
            workflow_lam=self.workflow_lam,
            lam_range=self.workflow_lam_range,
            cost_model=self.cost_model,
            aggregate=self.final_answer,
            k_available=self.k_available,
            holdout_subsets=self.holdout_subsets if training else (),
        )

    def plan_grammars(
        self, tokenizer: PreTrainedTokenizerBase, model: PreTrainedModel, envs: Sequence[ConductorEnv]
    ) -> PlanGrammars:
        """The grammar of each of ``envs``' conductor prompts, sized to the shorter completion budget."""
        budget = min(int(self.grpo.get("max_completion_length", 256)), self.eval.max_new_tokens)
        return plan_grammars(
            tokenizer,
            model,
            envs,
            self.chat,
            self.seed,
            self.workflow_max_steps,
            budget,
            self.answer_prefix,
            final=self.final_answer == "plan",
        )

    def env(
        self, split: str, n: int | None, pool: Any = None, tasks: Any = None, training: bool = True
    ) -> ConductorEnv:
        """The workflow-mode env of this run on ``split`` (first ``n`` items), or on given ``tasks``."""
        from puppeteer.agents.pool import Pool, load_pool

        pool = pool if isinstance(pool, Pool) else load_pool(self.pool)
        return ConductorEnv(
            self.env_config(pool, training),
            pool=pool,
            **(dict(tasks=tasks) if tasks is not None else dict(suite=self.suite, split=split, n_tasks=n)),
            cache=self.cache,
        )


def _lam_range(value: Any) -> tuple[float, float] | None:
    """``workflow_lam_range`` from a config: None/empty, or [low, high] (checked by LamRange)."""
    if not value:
        return None
    bounds = LamRange.of(tuple(float(v) for v in value))
    return bounds.bounds if bounds is not None else None


def scale_rewards_choice(value: Any, priced: bool) -> str | bool:
    """``grpo.scale_rewards``: as given, or (null) ``"none"`` when the reward has a price, else ``"group"``.

    trl's default divides each group's advantages by the group's reward spread. When every completion
    of a group gets the same grade, that spread is only the price term (lambda x cost), so the division
    blows cost differences of a thousandth of a point up to unit advantages: at lambda 0.01 per US cent
    GRPO then learned the same one cheap call as at lambda 1 and lowered the reward it was trained on
    (docs/conductor-grpo.md, "The price, swept"). Unscaled advantages (Dr. GRPO) keep each term at its
    weight in the reward.
    """
    if value is None:
        return "none" if priced else "group"
    return value


def bf16_choice(value: Any) -> bool:
    """``grpo.bf16``: a bool, or ``"auto"``: bf16 where the hardware multiplies in it natively.

    On a GPU, ``torch.cuda.is_bf16_supported()``; on a CPU, AMX or AVX-512-BF16 (there bf16 autocast
    made SmolLM2's GRPO step 1.9-2.6x faster, ``benchmarks/bench_conductor_dtype.py``; on an AVX2-only CPU
    it is emulated: a probe sampled 8 x 32 tokens of the 0.5B model in 236 s against 145 s in fp32).
    """
    if isinstance(value, bool):
        return value
    if str(value).lower() != "auto":
        raise ValueError(f"grpo.bf16 must be true, false or auto, got {value!r}")
    import torch

    if torch.cuda.is_available():
        return bool(torch.cuda.is_bf16_supported())
    return bool(torch.cpu._is_amx_tile_supported() or torch.cpu._is_avx512_bf16_supported())


def grpo_config(job: GRPOJob, output_dir: Path) -> Any:
    """The ``trl.GRPOConfig``: the job's ``grpo`` mapping plus what this wiring fixes (logging, seed)."""
    import torch
    from trl import GRPOConfig

    kwargs: dict[str, Any] = {
        "logging_steps": 1,
        "save_strategy": "steps",
        "report_to": "none",  # metrics go to the project's logger through MetricForwarder
        "disable_tqdm": True,
        **dict(job.grpo),
        "output_dir": str(output_dir),
        "seed": job.seed,
    }
    if not torch.cuda.is_available():  # trl fails on CPU with its bf16 default (DESIGN.md) ...
        # ... unless use_cpu is set: then an explicit grpo.bf16=true is bf16 autocast on the CPU (fp32
        # weights; AMX/AVX-512-BF16 matmuls, ~2-2.6x faster for SmolLM2, benchmarks/bench_conductor_dtype.py)
        kwargs.update(use_cpu=True, bf16=bool(job.grpo.get("bf16", False)), fp16=False)
    return GRPOConfig(**kwargs)


def metric_forwarder(logger: MetricLogger, on_log: OnLog | None = None) -> TrainerCallback:
    """A trainer callback that sends numeric log entries to the project's metric logger as ``train/...``."""
    from transformers import TrainerCallback

    class MetricForwarder(TrainerCallback):
        def on_log(
            self, args: Any, state: Any, control: Any, logs: Mapping[str, Any] | None = None, **kw: Any
        ):
            numeric = {f"train/{k}": float(v) for k, v in (logs or {}).items() if isinstance(v, int | float)}
            if numeric:
                logger.log(numeric, step=int(state.global_step))
                if on_log is not None:
                    on_log(int(state.global_step), numeric)

    return MetricForwarder()


def time_budget(seconds: float) -> TrainerCallback:
    """A trainer callback that ends training (with a checkpoint) once ``seconds`` of it have passed.

    Counted from this process's start of training, so a resumed run gets the budget again.
    """
    from transformers import TrainerCallback

    class TimeBudget(TrainerCallback):
        def __init__(self) -> None:
            self.start: float | None = None

        def on_train_begin(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
            self.start = time.perf_counter()

        def on_step_end(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
            if self.start is not None and time.perf_counter() - self.start > seconds:
                log.warning("time budget of %.0f s spent at step %d: stopping", seconds, state.global_step)
                control.should_training_stop = True
                control.should_save = True

    return TimeBudget()


def latest_checkpoint(directory: Path) -> Path | None:
    from transformers.trainer_utils import get_last_checkpoint

    if not directory.is_dir():
        return None
    last = get_last_checkpoint(str(directory))
    return Path(last) if last else None


def resume_from(job: GRPOJob, checkpoints: Path) -> str | None:
    if job.resume == "never":
        return None
    if job.resume == "auto":
        last = latest_checkpoint(checkpoints)
        return str(last) if last else None
    path = Path(job.resume)
    if not path.is_dir():
        raise FileNotFoundError(f"resume checkpoint {path} not found")
    return str(path)


# ----------------------------------------------------------------------------- held-out evaluation
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


# ----------------------------------------------------------------------------- the job
def train_dataset(job: GRPOJob, env: ConductorEnv, tokenizer: PreTrainedTokenizerBase) -> Any:
    """The env's conductor prompts; with ``answer_prefix``, as text whose assistant turn is opened."""
    if not job.answer_prefix:
        return conductor_dataset(env, chat=job.chat, seed=job.seed)
    import datasets

    if not job.chat:
        raise ValueError("answer_prefix needs chat=true (it opens the assistant turn of the chat template)")
    rows = prefixed_rows(conductor_rows(env, chat=True, seed=job.seed), tokenizer, job.answer_prefix)
    return datasets.Dataset.from_list(rows)


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

    from puppeteer.train.grpo_trainer import SharedPromptGRPOTrainer

    job = GRPOJob.from_mapping(cfg)
    run = Path(run_dir)
    run.mkdir(parents=True, exist_ok=True)
    (run / "config.json").write_text(json.dumps(cfg, indent=2, default=str))
    start = time.perf_counter()
    train_env = job.env(job.train_split, job.n_train)
    eval_env = job.env(job.eval_split, job.n_eval, pool=train_env.pool, training=False)
    model, tokenizer = load_conductor_model(job.model)
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
        "track": "conductor",
        "backend": label,
        "model": job.model.id,
        "suite": job.suite,
        "pool": train_env.pool.name,
        "eval_split": job.eval_split,
        "n_train": len(train_env.tasks),
        "n_eval": len(eval_env.tasks),
        "steps": int(trainer.state.global_step),
        "resumed_from": resumed,
        "heldout_before": before,
        "heldout_after": after,
        "heldout_paired": paired_heldout(run / "heldout_before.jsonl", run / "heldout_after.jsonl"),
        "wall_s": time.perf_counter() - start,
        "train_wall_s": train_wall,
        "peak_rss_mb": _peak_rss_mb(),
        "seed": job.seed,
        "grpo": {k: v for k, v in dict(job.grpo).items()},
        "lora": job.lora.__dict__ if job.lora else None,
    }
    (run / "results.json").write_text(json.dumps(results, indent=2, default=str))
    (run / "log_history.json").write_text(json.dumps(history, indent=2))
    conductor_curve(
        history, run / "learning_curve.png", f"conductor GRPO on {job.suite} [{label}]", before, after
    )
    return results


def conductor_curve(
    history: Sequence[Mapping[str, Any]],
    path: str | Path,
    title: str,
    before: Mapping[str, Any] | None = None,
    after: Mapping[str, Any] | None = None,
) -> Path:
    """Train reward, parse rate and accuracy per GRPO step; held-out accuracy and parse rate before/after.

    The train reward is trl's sum over the reward functions (with a format score it can pass 1), so
    the y axis grows to show it whole; the held-out points carry 95% Wilson intervals.
    """
    from puppeteer.analytics.plots import _title, plt, save

    rows = [h for h in history if "reward" in h and "step" in h]
    fig, ax = plt.subplots(figsize=(7.5, 4.2))
    labels = {
        "reward": "train reward (mean, all reward functions)",
        "conductor/parse_rate": "train parse rate",
        "conductor/accuracy": "train accuracy",
    }
    top = 1.0
    for key in CURVE_KEYS:
        pts = [(h["step"], h[key]) for h in rows if key in h]
        if pts:
            ax.plot(*zip(*pts, strict=True), marker=".", alpha=0.8, label=labels[key])
            top = max(top, *(y for _, y in pts))
    last = max((h["step"] for h in rows), default=1)
    held = (
        ("accuracy", "s", "black", "held-out accuracy"),
        ("parse_rate", "D", "tab:red", "held-out parse rate"),
    )
    for key, marker, color, label in held:
        for x, res in ((0, before), (last, after)):
            if res and key in res:
                lo, hi = res[f"{key}_ci95"]
                y = res[key]
                ax.errorbar(
                    [x + (0.3 if key == "parse_rate" else 0.0)],
                    [y],
                    yerr=[[y - lo], [hi - y]],
                    fmt=marker,
                    color=color,
                    capsize=4,
                    label=f"{label}, greedy (95% CI)" if x == 0 or before is None else None,
                )
    ax.set_xlabel("GRPO step")
    ax.set_ylim(-0.05, top + 0.05)
    ax.set_title(_title(title), fontsize=9)
    ax.legend(fontsize=7, loc="upper left")
    return save(fig, path)
