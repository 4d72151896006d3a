"""Can GRPO learn from this conductor? Its SAMPLED parse rate and reward variance per question.

GRPO's advantage is a sample's reward minus its group's mean: a group (one question, k
samples) whose rewards are all equal teaches nothing. Before a long CPU run, sample k
completions per question the way trl does (temperature 1.0, the same generation settings) and
count how many groups have any reward variance. Conductor: transformers (the model GRPO would
train); workers: whatever the pool says (sim-paper: instant).

    python experiments/conductor-grpo/conductor_grpo_probe.py --model smollm2-135m --questions 8 --samples 8
"""

from __future__ import annotations

import json
import logging
import statistics
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from puppeteer.evaluation.stats import wilson_interval
from puppeteer.integrations.trl import WorkflowOutcome, WorkflowScorer, conductor_rows, prefixed_rows
from puppeteer.train.conductor_generation import access_list_stop_kwargs
from puppeteer.train.conductor_model import ModelSpec, load_conductor_model
from puppeteer.train.shared_prefix import install_shared_prefix

if TYPE_CHECKING:
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class SamplingSpec:
    """How completions are sampled: the generation settings GRPO would use."""

    max_new_tokens: int = 256
    temperature: float = 1.0
    top_p: float = 1.0
    repetition_penalty: float = 1.0
    stop_after_access_list: bool = True
    autocast_bf16: bool = False  # sample under torch.autocast(bfloat16), as trl does with bf16=True on CPU


@dataclass(frozen=True)
class ProbeSpec:
    model: ModelSpec = field(default_factory=ModelSpec)
    suite: str = "arith"
    pool: str = "sim-paper"
    split: str = "train"
    questions: int = 8
    samples: int = 8
    chat: bool = True
    answer_prefix: str = ""  # the assistant turn starts with this text (chat only), e.g. "model_id = ["
    prompt: str = "prompt-v1"  # the conductor prompt config
    available: tuple[str, ...] | None = None  # a fixed subset of the pool's agents
    sampling: SamplingSpec = field(default_factory=SamplingSpec)
    seed: int = 0


@dataclass(frozen=True)
class GroupStats:
    """One question's k sampled workflows."""

    task_id: str
    n: int
    parsed: int
    correct: int
    reward_mean: float
    reward_std: float
    mean_tokens: float
    capped: int  # completions that hit max_new_tokens
    seconds: float

    @property
    def has_variance(self) -> bool:
        return self.reward_std > 0.0


def sample_group(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    prompt: str | Sequence[Mapping[str, str]],
    k: int,
    sampling: SamplingSpec,
    seed: int,
) -> tuple[list[str], list[int]]:
    """``k`` sampled completions of one prompt and their token counts (EOS included, as trl counts)."""
    import torch

    chat = not isinstance(prompt, str)
    text = (
        tokenizer.apply_chat_template(list(prompt), tokenize=False, add_generation_prompt=True)
        if chat
        else prompt
    )
    enc = tokenizer([text], return_tensors="pt", add_special_tokens=not chat).to(model.device)
    kwargs: dict[str, Any] = {
        **enc,
        "do_sample": True,
        "temperature": sampling.temperature,
        "top_p": sampling.top_p,
        "top_k": 0,
        "repetition_penalty": sampling.repetition_penalty,
        "max_new_tokens": sampling.max_new_tokens,
        "num_return_sequences": k,
        "pad_token_id": tokenizer.pad_token_id,
    }
    if sampling.stop_after_access_list:
        kwargs = access_list_stop_kwargs(tokenizer)(kwargs)
    torch.manual_seed(seed)
    autocast = torch.autocast(model.device.type, dtype=torch.bfloat16, enabled=sampling.autocast_bf16)
    with torch.no_grad(), autocast:
        out = model.generate(**kwargs)
    new = out[:, enc["input_ids"].shape[1] :]
    eos = tokenizer.eos_token_id
    lengths = []
    for row in new.tolist():
        lengths.append(row.index(eos) + 1 if eos in row else len(row))
    return tokenizer.batch_decode(new, skip_special_tokens=True), lengths


def group_stats(
    task_id: str, outcomes: Sequence[WorkflowOutcome], lengths: Sequence[int], cap: int, seconds: float
) -> GroupStats:
    rewards = [o.reward for o in outcomes]
    return GroupStats(
        task_id=task_id,
        n=len(outcomes),
        parsed=sum(o.parsed for o in outcomes),
        correct=sum(o.correct for o in outcomes),
        reward_mean=statistics.fmean(rewards),
        reward_std=statistics.pstdev(rewards),
        mean_tokens=statistics.fmean(lengths),
        capped=sum(n >= cap for n in lengths),
        seconds=seconds,
    )


def summarize_groups(groups: Sequence[GroupStats]) -> dict[str, Any]:
    n = sum(g.n for g in groups)
    parsed = sum(g.parsed for g in groups)
    correct = sum(g.correct for g in groups)
    return {
        "questions": len(groups),
        "samples": n,
        "parse_rate": parsed / max(n, 1),
        "parse_rate_ci95": list(wilson_interval(parsed, n)),
        "accuracy": correct / max(n, 1),
        "reward": statistics.fmean(g.reward_mean for g in groups) if groups else 0.0,
        "groups_with_variance": sum(g.has_variance for g in groups),
        "questions_with_a_parse": sum(g.parsed > 0 for g in groups),
        "mean_tokens": statistics.fmean(g.mean_tokens for g in groups) if groups else 0.0,
        "capped_rate": sum(g.capped for g in groups) / max(n, 1),
        "seconds_per_group": statistics.fmean(g.seconds for g in groups) if groups else 0.0,
    }


def run_probe(
    spec: ProbeSpec,
    out: str | Path | None = None,
    loaded: tuple[PreTrainedModel, PreTrainedTokenizerBase] | None = None,
) -> dict[str, Any]:
    """Sample ``spec.samples`` workflows for each of ``spec.questions`` items, execute them, summarize.

    With ``out``, every sample (completion, outcome) goes to ``out/samples.jsonl`` as it is made
    and the summary to ``out/probe.json``.
    """
    from puppeteer.train.grpo import GRPOJob

    job = GRPOJob(suite=spec.suite, pool=spec.pool, prompt=spec.prompt, available=spec.available)
    env = job.env(spec.split, spec.questions)
    model, tokenizer = loaded if loaded is not None else load_conductor_model(spec.model)
    install_shared_prefix(model)  # the k samples of a question share one prefill
    model.eval()
    scorer = WorkflowScorer(env, max_workers=1, seed=spec.seed, answer_prefix=spec.answer_prefix)
    rows = conductor_rows(env, chat=spec.chat)
    if spec.answer_prefix:
        rows = prefixed_rows(rows, tokenizer, spec.answer_prefix)
    path = Path(out) if out is not None else None
    if path is not None:
        path.mkdir(parents=True, exist_ok=True)
    records = (path / "samples.jsonl").open("w") if path is not None else None
    groups: list[GroupStats] = []
    try:
        for i, row in enumerate(rows):
            start = time.perf_counter()
            texts, lengths = sample_group(
                model, tokenizer, row["prompt"], spec.samples, spec.sampling, spec.seed * 100_003 + i
            )
            outcomes = scorer.score([row["task_id"]] * len(texts), texts)
            group = group_stats(
                row["task_id"], outcomes, lengths, spec.sampling.max_new_tokens, time.perf_counter() - start
            )
            groups.append(group)
            log.info(
                "%s: %d/%d parsed, %d correct, reward std %.2f, %.0f tokens, %.0f s",
                group.task_id,
                group.parsed,
                group.n,
                group.correct,
                group.reward_std,
                group.mean_tokens,
                group.seconds,
            )
            if records is not None:
                for o, text, n_tok in zip(outcomes, texts, lengths, strict=True):
                    row_out = {**asdict(o), "tokens": n_tok, "completion": spec.answer_prefix + text}
                    records.write(json.dumps(row_out) + "\n")
                records.flush()
    finally:
        if records is not None:
            records.close()
    summary = {
        "model": spec.model.id,
        "backend": f"conductor = transformers ({spec.model.id}, {spec.model.dtype}), "
        f"workers = {','.join(env.pool.backends())}",
        "suite": spec.suite,
        "pool": spec.pool,
        "split": spec.split,
        "chat": spec.chat,
        "answer_prefix": spec.answer_prefix,
        "prompt": spec.prompt,
        "available": list(spec.available) if spec.available else None,
        "sampling": asdict(spec.sampling),
        **summarize_groups(groups),
        "groups": [asdict(g) for g in groups],
    }
    if path is not None:
        (path / "probe.json").write_text(json.dumps(summary, indent=2))
    return summary
