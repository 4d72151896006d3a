"""``puppeteer outcomes fit-sim``: fit a simulated pool to a pool's shipped outcome table and write it.

Reads the pool's table (:func:`puppeteer.backends.replay.read_outcomes`,
:func:`~puppeteer.backends.replay.read_steps`) and the suite's questions (their lengths: the visible
difficulty), fits it
(:func:`puppeteer.analytics.sim_fit.fit_table`) and writes a pool file whose agents mirror the real ones
on the simulator (:func:`pool_document`), with a header naming the table and the command.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from puppeteer.agents.pool import Pool, load_pool
from puppeteer.analytics.sim_fit import AgentSpec, SimFit, fit_table
from puppeteer.backends.replay import StepOutcome, read_outcomes, read_steps
from puppeteer.backends.sim.difficulty import visible_feature
from puppeteer.errors import UserError
from puppeteer.jobs.outcomes import Shard
from puppeteer.tasks import load_suite


@dataclass(frozen=True)
class FitSimConfig:
    pool: str = "local-mix-steps"
    suite: str = "mix-local"
    name: str = "sim-local"
    out: Path | None = None  # None: return the text only
    fit_group: bool = True
    seed: int = 0
    # the recorded verifier chains the fit reads: these verifiers (empty: every one the table holds), on
    # the first N items of these splits (empty: every item): a table grows, a shipped fit stays reproducible
    verifiers: tuple[str, ...] = ()
    chains: tuple[Shard, ...] = ()


def agent_specs(pool: Pool) -> list[AgentSpec]:
    return [
        AgentSpec(a.name, a.model.name, a.pattern, tuple(a.tools), a.max_tokens, pool.reads_context(i))
        for i, a in enumerate(pool.agents)
    ]


def _model_entry(
    pool: Pool,
    agent: str,
    real_model: str,
    skills: Mapping[str, float],
    tokens: Mapping[str, float],
    nonint: Mapping[str, float] | None = None,
) -> dict[str, Any]:
    spec = next(a.model for a in pool.agents if a.model.name == real_model)
    entry: dict[str, Any] = {"backend": "sim", "target": f"sim-{agent}"}
    if spec.params_b:
        entry["params_b"] = spec.params_b
    if spec.prefill_tps and spec.decode_tps:
        entry["prefill_tps"] = spec.prefill_tps
        entry["decode_tps"] = spec.decode_tps
    entry["options"] = {
        "skills": dict(skills),
        "tokens_mean": dict(tokens),
        "tokens_per_s": spec.decode_tps or 50.0,
        "first_token_s": 0.0,
        "group": real_model,
    }
    if nonint:
        entry["options"]["nonint_wrong"] = dict(nonint)
    return entry


def pool_document(fit: SimFit, pool: Pool, name: str, seed: int = 0) -> dict[str, Any]:
    """The simulated pool: one simulated model per real agent (its skills, tokens and speeds; its
    ``group`` the real model), the fitted latent, and the verifiers' revision parameters."""
    real = {a.name: a for a in pool.agents}
    patterns = sorted({a.pattern for a in fit.agents} | {real[v.agent].pattern for v in fit.verifiers})
    verifier = fit.verifiers[0] if fit.verifiers else None
    sim: dict[str, Any] = {
        "seed": seed,
        "rho": round(sum(fit.latent.rho.values()) / max(len(fit.latent.rho), 1), 3),
        "group_corr": fit.latent.group_corr,
        "repeat_corr": 1.0,
        # every pattern's accuracy and tokens are the agent's own (declared per simulated model)
        "pattern_effects": {p: 0.0 for p in patterns},
        "token_multipliers": {p: 1.0 for p in patterns},
        "tool_effects": {},
        "tokens_sigma": fit.tokens_sigma,
        "keep_slip": verifier.keep_slip if verifier else 0.3,
        "switch_prob": verifier.switch_prob if verifier else 0.0,
        "difficulty": {
            "quantiles": {k: list(v) for k, v in fit.quantiles.items()},
            "rho": dict(fit.latent.rho),
            "visible": {k: v for k, v in fit.latent.visible.items() if k in fit.quantiles},
        },
    }
    if not fit.quantiles:
        sim["difficulty"] = {"rho": dict(fit.latent.rho)}
    models: dict[str, Any] = {}
    agents: list[dict[str, Any]] = []
    for a in fit.agents:
        models[a.name] = _model_entry(pool, a.name, a.model, a.skills, a.tokens_mean, a.nonint_wrong)
        entry: dict[str, Any] = {"name": a.name, "model": a.name, "pattern": a.pattern}
        if a.tools:
            entry["tools"] = list(a.tools)
        entry["max_tokens"] = a.max_tokens
        agents.append(entry)
    for v in fit.verifiers:
        models[v.agent] = _model_entry(pool, v.agent, real[v.agent].model.name, v.skills, v.tokens_mean)
        agents.append(
            {
                "name": v.agent,
                "model": v.agent,
                "pattern": real[v.agent].pattern,
                "max_tokens": real[v.agent].max_tokens,
            }
        )
    return {
        "name": name,
        "description": f"Simulated mirror of {pool.name}: its agents' accuracy, tokens and error "
        "correlation, fitted on its shipped outcome table",
        "context_layout": pool.context_layout,
        "independent_solvers": True,
        "backend_options": {"sim": sim},
        "models": models,
        "agents": agents,
    }


def header(config: FitSimConfig, pool: Pool, fit: SimFit) -> str:
    lat = fit.latent
    chosen = "".join(f" --verifier {v}" for v in config.verifiers) + "".join(
        f" --chains {c.split}:{c.n}" for c in config.chains
    )
    lines = [
        f"# GENERATED by `puppeteer outcomes fit-sim --pool {config.pool} --suite {config.suite} "
        f"--name {config.name}{chosen} --out agents/{config.name}.yaml`",
        "# (puppeteer/jobs/sim_fit.py); do not edit by hand.",
        f"# Fitted from the shipped real outcome table {pool.replay.name if pool.replay else '?'}/ "
        f"({pool.name}: llama.cpp, greedy):",
        f"# every solver alone on {lat.n_items} items, and {sum(v.n for v in fit.verifiers)} recorded "
        "verifier chains.",
        "# Each simulated model is one real agent: skills = its accuracy per kind, tokens_mean = its",
        "# mean completion tokens per kind, the real model's declared speeds (cost model 'minutes');",
        "# `group` = the real model, whose agents share group_corr of their correctness latent on an",
        "# item beyond rho. Maximum likelihood of the items x agents table",
        f"# (puppeteer/analytics/sim_fit.py): group_corr {lat.group_corr} (log-likelihood {lat.loglik:.1f}",
        f"# against {lat.loglik_no_group:.1f} with group_corr 0); rho and the visible share per kind",
        "# below. repeat_corr 1: the real calls are greedy, a repeat answers the same. Verifier: its",
        "# own skill per kind gives the table's fix rate, keep_slip its break rate, switch_prob its",
        "# detection rate. nonint_wrong: per whole-number kind, the share of the agent's wrong answers",
        "# that are not whole numbers (or none): where the rules' not-integer signal fires.",
        "# Real against simulated: experiments/sim-calibrated/.",
    ]
    return "\n".join(lines) + "\n"


def chains_read(steps: Sequence[StepOutcome], config: FitSimConfig) -> list[StepOutcome]:
    """The recorded chains of ``config``'s suite, verifiers and shards."""
    items = {(c.split, t.id) for c in config.chains for t in load_suite(config.suite, c.split, n=c.n)}
    for name in config.verifiers:
        if not any(s.agent == name for s in steps):
            raise UserError(f"the table records no chain of verifier {name!r}")
    return [
        s
        for s in steps
        if s.suite == config.suite
        and (not config.verifiers or s.agent in config.verifiers)
        and (not config.chains or (s.split, s.task_id) in items)
    ]


def fit_sim(config: FitSimConfig) -> tuple[SimFit, str]:
    """Fit the pool's table; return the fit and the pool file's text (written to ``config.out``)."""
    pool = load_pool(config.pool)
    if pool.replay is None:
        raise UserError(f"pool {config.pool!r} has no shipped outcome table (a replay: folder)")
    outcomes = read_outcomes(pool.replay)
    steps = read_steps(pool.replay)
    splits = sorted({o.split for o in outcomes if o.suite == config.suite})
    tasks = [t for s in splits for t in load_suite(config.suite, s)]
    features = {t.id: visible_feature(t.question) for t in tasks}
    rows = [o for o in outcomes if o.suite == config.suite]
    fit = fit_table(rows, chains_read(steps, config), agent_specs(pool), features, config.fit_group)
    doc = pool_document(fit, pool, config.name, config.seed)
    text = header(config, pool, fit) + yaml.safe_dump(
        doc, sort_keys=False, default_flow_style=None, width=120, allow_unicode=True
    )
    if config.out is not None:
        config.out.parent.mkdir(parents=True, exist_ok=True)
        config.out.write_text(text, encoding="utf-8")
    return fit, text


__all__ = ["FitSimConfig", "agent_specs", "chains_read", "fit_sim", "header", "pool_document"]
