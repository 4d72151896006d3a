"""A conductor GRPO run's settings (:class:`GRPOJob`, built from the Hydra config) and the
``trl.GRPOConfig`` they make."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from puppeteer.envs.aggregate import PLAN_CHOICES
from puppeteer.envs.build import EnvConfig
from puppeteer.envs.env import ConductorEnv
from puppeteer.envs.lam_range import LamRange
from puppeteer.train.conductor_model import ModelSpec
from puppeteer.train.extras import require
from puppeteer.train.grpo.warm_start import WarmStartSpec
from puppeteer.train.plan_constraint import PlanGrammars, plan_grammars

if TYPE_CHECKING:
    from transformers import PreTrainedModel, PreTrainedTokenizerBase


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
    # the final answer of a plan (EnvConfig.aggregate): last | vote | plan (the plan's own final line) |
    # cascade (that line may also make the plan a cascade: final = 'cascade:TRIGGER')
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
    warm_start: WarmStartSpec | None = None  # fine-tune on the best plan per training question first
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

        warm = dict(cfg.get("warm_start") or {})
        warm_spec = WarmStartSpec.from_mapping(warm) if warm.pop("enabled", False) else None
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
            warm_start=warm_spec,
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
            final=self.final_answer in PLAN_CHOICES,
            cascade=self.final_answer == "cascade",
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
        "save_total_limit": 2,  # a 0.5B checkpoint with its optimizer state is 1.6 GB; a job may keep more
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
