"""Agents a router has never seen: the study behind
``experiments/unseen-agents/unseen_agents_study.py`` and ``experiments/unseen-agents/README.md``.

A card-reading router (``PolicyConfig.cards``) is trained on a pool with some agents held out (they
are not in the training pool at all: no call, no card statistic, no output), then given the whole
pool at evaluation (:meth:`~puppeteer.policies.puppeteer.PuppeteerPolicy.with_pool`). It is compared,
on the same held-out items and draws, with itself on the training pool only, with a router
retrained on the whole pool, and with the whole pool's optimum given what the question shows
(:mod:`puppeteer.analytics.optimum`). The return gain that the added agents bring is then
``(unseen - six) / (retrained - six)``, realised and in expectation (each item's right answer
replaced by its probability given the visible score, which removes the luck of the draws).

On a simulated pool the optimum and the expected returns use the simulator's probabilities; on a pool
of real models (replayed from its outcome table) nothing knows those, so the expected return is the
realised one and the "optimum" is the per-item oracle (the agent that was right, cheapest first).
"""

from __future__ import annotations

import json
import logging
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from puppeteer.agents.pool import Pool, PoolError, load_pool
from puppeteer.analytics.optimum import sim_backend
from puppeteer.envs.build import EnvConfig, build_env
from puppeteer.envs.encoders import CachedEncoder
from puppeteer.envs.env import ConductorEnv
from puppeteer.envs.reward import COST_UNITS
from puppeteer.envs.rollout import Episode, run_actions, run_lockstep
from puppeteer.jobs.builder import env_copies
from puppeteer.policies.puppeteer import PuppeteerPolicy
from puppeteer.policies.puppeteer_config import PolicyConfig
from puppeteer.train.reinforce import ReinforceConfig, train

log = logging.getLogger(__name__)

EVAL_SEED = 10_000  # item i of the held-out env is reset with EVAL_SEED + i (as the routing study)


@dataclass(frozen=True)
class UnseenSettings:
    """One study: the pool, the agents held out of training, the world and the learner."""

    pool: str = "sim-routing"
    suite: str = "mix-routing"
    held: tuple[str, ...] = ("coder32b-cot", "math72b-cot")
    lam: float = 0.05
    n_train: int = 300
    # the whole test split: on the first 200 items the draws' luck hides the gain (the whole pool's
    # optimum realises less than the training pool's there, though it expects 1 point more)
    n_eval: int = 400
    episodes: int = 65_536
    batch_episodes: int = 512
    group_size: int = 4
    lr: float = 3e-3
    entropy: float = 0.01
    # trainer.entropy_final_fraction: the entropy bonus decays linearly to this fraction of `entropy`
    entropy_final: float = 1.0
    first_step: str = "all"
    encoder: str = "minilm"
    surface: bool = True
    hidden: int = 128
    cards_linear: bool = False  # policy.cards_linear: the agent only through its card's price and accuracy
    cards_text: bool = True  # policy.cards_text: the agent's text beside its card
    # what lambda prices: `usd` (US cents) on priced pools; `minutes` (model minutes at the declared
    # speeds) on local pools, whose calls cost no money
    cost_model: str = "usd"
    task_dims: int | None = None  # policy.task_dims: the question on its k principal directions

    def env_config(self) -> EnvConfig:
        return EnvConfig(mode="step", lam=self.lam, max_steps=1, min_steps=1, cost_model=self.cost_model)

    def policy_config(self) -> PolicyConfig:
        return PolicyConfig(
            encoder=self.encoder,
            hidden=self.hidden,
            max_steps=1,
            min_steps=1,
            surface=self.surface,
            cards=True,
            cards_linear=self.cards_linear,
            cards_text=self.cards_text,
            task_dims=self.task_dims,
        )

    def trainer(self, seed: int) -> ReinforceConfig:
        return ReinforceConfig(
            episodes=self.episodes,
            batch_episodes=self.batch_episodes,
            group_size=self.group_size,
            lr=self.lr,
            entropy_coef=self.entropy,
            entropy_final_fraction=self.entropy_final,
            first_step=self.first_step,
            eval_every=10**9,
            seed=seed,
        )


def training_pool(pool: Pool, held: Sequence[str]) -> Pool:
    """``pool`` without the ``held`` agents (the pool a router is trained on)."""
    names = [a.name for a in pool.agents]
    unknown = [h for h in held if h not in names]
    if unknown or not held:
        raise PoolError(
            f"held-out agents must be agents of pool {pool.name!r}; got {list(held)}, known {names}"
        )
    kept = [n for n in names if n not in held]
    if not kept:
        raise PoolError(f"holding out {list(held)} leaves pool {pool.name!r} empty")
    return pool.subset(kept)


def train_router(
    pool: Pool, s: UnseenSettings, seed: int, run_dir: Path, encoder: CachedEncoder | None = None
) -> PuppeteerPolicy:
    """A card-reading router trained on ``pool`` (``s.n_train`` training items), switched to greedy."""
    env = build_env(s.env_config(), pool=pool, suite=s.suite, split="train", n_tasks=s.n_train)
    policy = PuppeteerPolicy(pool, s.policy_config(), encoder=encoder, seed=seed)
    train(env, policy, s.trainer(seed), run_dir)
    policy.config = replace(policy.config, greedy=True)
    return policy


@dataclass(frozen=True)
class OutcomeTable:
    """Every agent of a pool on every held-out item (reset seed EVAL_SEED + i): the realised return,
    grade and price, and (simulated pools) the expected return given the visible score; on real pools
    the expected return is the realised one."""

    names: tuple[str, ...]
    task_ids: tuple[str, ...]
    domains: tuple[str, ...]
    ret: np.ndarray  # (items, agents)
    correct: np.ndarray  # (items, agents), bool
    cents: np.ndarray  # (items, agents): the env's cost of the call (in the cost model's unit)
    expected: np.ndarray  # (items, agents): E[return | item's visible score, agent]

    @classmethod
    def of(cls, env: ConductorEnv) -> OutcomeTable:
        sim = sim_backend(env) if "sim" in env.pool.backends() else None
        stop = env.pool.terminator_id
        n, k = len(env.tasks), len(env.pool)
        ret, correct, cents, expected = (np.zeros((n, k)) for _ in range(4))
        for a in range(k):
            agent = env.pool.agent(a)
            for i, task in enumerate(env.tasks):
                end = run_actions(env, [a, stop], seed=EVAL_SEED + i, options={"task_index": i})
                g = env.config.gamma ** (len(end.rewards) - 1)
                ret[i, a], correct[i, a], cents[i, a] = end.ret, end.correct, end.cost
                expected[i, a] = end.ret
                if sim is not None:
                    expected[i, a] += g * (sim.accuracy_given_visible(agent, task.id) - float(end.correct))
        return cls(
            names=tuple(a.name for a in env.pool.agents),
            task_ids=tuple(t.id for t in env.tasks),
            domains=tuple(t.domain for t in env.tasks),
            ret=ret,
            correct=correct.astype(bool),
            cents=cents,
            expected=expected,
        )

    def score(self, routes: Sequence[str]) -> dict[str, Any]:
        """Accuracy, return, expected return, cost and shares of a one-call router's routes (agent names)."""
        idx = np.array([self.names.index(r) for r in routes])
        rows = np.arange(len(idx))
        shares = Counter(routes)
        by_domain: dict[str, Counter[str]] = {}
        for d, r in zip(self.domains, routes, strict=True):
            by_domain.setdefault(d, Counter())[r] += 1
        return {
            "accuracy": float(self.correct[rows, idx].mean()),
            "return": float(self.ret[rows, idx].mean()),
            "expected_return": float(self.expected[rows, idx].mean()),
            "cost": float(self.cents[rows, idx].mean()),
            "shares": {n: shares.get(n, 0) / len(routes) for n in self.names},
            "routes_by_domain": {d: dict(c.most_common()) for d, c in sorted(by_domain.items())},
        }

    def optimum(self, available: Sequence[str] | None = None) -> list[str]:
        """Per item, the available agent of highest expected return (ties: the earliest)."""
        cols = [self.names.index(n) for n in (available or self.names)]
        best = self.expected[:, cols].argmax(axis=1)
        return [self.names[cols[b]] for b in best]


def routes(policy: PuppeteerPolicy, env: ConductorEnv) -> list[str]:
    """The greedy router's one call on every item of ``env`` (reset seed EVAL_SEED + i), by agent name."""
    specs = [(EVAL_SEED + i, i) for i in range(len(env.tasks))]
    eps: list[Episode] = run_lockstep(env_copies(env, 32), policy, specs, greedy=True)
    return [env.pool.agent(e.actions[0]).name for e in eps]


KINDS = ("held-out", "retrained")


def run_one(
    out: Path, work: Path, s: UnseenSettings, kind: str, seed: int, encoder: CachedEncoder | None = None
) -> dict[str, Any]:
    """One router for one seed, evaluated greedily on the held-out items; cached in
    ``out/runs/{kind}-s{seed}.json`` (training files under ``work``).

    ``held-out``: trained on the pool without ``s.held``, evaluated on that pool (``six``) and on the
    whole pool with the held-out agents added (``unseen``). ``retrained``: trained and evaluated on the
    whole pool (``retrained``).
    """
    if kind not in KINDS:
        raise ValueError(f"unknown kind {kind!r}; known: {', '.join(KINDS)}")
    path = out / "runs" / f"{kind}-s{seed}.json"
    if path.exists():
        return dict(json.loads(path.read_text()))
    start = time.perf_counter()
    full = load_pool(s.pool)
    test = build_env(s.env_config(), pool=full, suite=s.suite, split="test", n_tasks=s.n_eval)
    table = OutcomeTable.of(test)
    result: dict[str, Any] = {"kind": kind, "seed": seed, "held": list(s.held)}
    if kind == "held-out":
        pool = training_pool(full, s.held)
        router = train_router(pool, s, seed, work / f"{kind}-s{seed}", encoder)
        test_six = build_env(s.env_config(), pool=pool, suite=s.suite, split="test", n_tasks=s.n_eval)
        result["six"] = table.score(routes(router, test_six))
        result["unseen"] = table.score(routes(router.with_pool(full), test))
    else:
        pool = full
        router = train_router(pool, s, seed, work / f"{kind}-s{seed}", encoder)
        result["retrained"] = table.score(routes(router, test))
    result["train_agents"] = [a.name for a in pool.agents]
    result["wall_s"] = time.perf_counter() - start
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result, indent=1))
    log.info(
        "%s seed %d: %s",
        kind,
        seed,
        {k: result[k]["return"] for k in ("six", "unseen", "retrained") if k in result},
    )
    return result


def references(out: Path, s: UnseenSettings) -> dict[str, Any]:
    """The optimum of the whole pool and of the training pool, and every single agent (same items)."""
    path = out / "references.json"
    if path.exists():
        return dict(json.loads(path.read_text()))
    full = load_pool(s.pool)
    test = build_env(s.env_config(), pool=full, suite=s.suite, split="test", n_tasks=s.n_eval)
    table = OutcomeTable.of(test)
    six = [n for n in table.names if n not in s.held]
    ref = {
        "optimum_full": table.score(table.optimum()),
        "optimum_six": table.score(table.optimum(six)),
        "singles": {n: table.score([n] * len(table.task_ids)) for n in table.names},
        "settings": asdict(s),
    }
    out.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(ref, indent=1))
    return ref


def gain_captured(six: float, unseen: float, retrained: float) -> float | None:
    """``(unseen - six) / (retrained - six)``; None when the retrained router gains nothing."""
    gain = retrained - six
    return None if abs(gain) < 1e-12 else (unseen - six) / gain


def _mean(runs: Sequence[dict[str, Any]], arm: str, key: str) -> float:
    return float(np.mean([r[arm][key] for r in runs]))


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{x:.0%}"


def report(out: Path, s: UnseenSettings) -> tuple[str, dict[str, Any]]:
    """``report.md``'s text and ``results.json``'s content from the cached runs (paired by seed)."""
    ref = references(out, s)
    held = {
        int(p.stem.split("-s")[-1]): json.loads(p.read_text())
        for p in (out / "runs").glob("held-out-s*.json")
    }
    full = {
        int(p.stem.split("-s")[-1]): json.loads(p.read_text())
        for p in (out / "runs").glob("retrained-s*.json")
    }
    seeds = sorted(set(held) & set(full))
    runs = [{**held[k], **full[k]} for k in seeds]
    surface = " with surface features" if s.surface else ""
    scorer = "`policy.cards`, `policy.cards_linear`" if s.cards_linear else "`policy.cards`"
    scorer += ", `policy.cards_text=false`" if not s.cards_text else ""
    learner = f", entropy {s.entropy:g}"
    learner += f" -> {s.entropy * s.entropy_final:g}" if s.entropy_final != 1 else ""
    learner += f", `task_dims={s.task_dims}`" if s.task_dims is not None else ""
    lines = [
        f"# Agents the router has never seen [backend: {', '.join(load_pool(s.pool).backends())}]",
        "",
        f"Pool `{s.pool}` over `{s.suite}`, lambda {s.lam:g}, one call per item, cost per "
        f"{COST_UNITS[s.cost_model]}; "
        f"held out of training: {', '.join(f'`{h}`' for h in s.held)}. Card-reading routers "
        f"({scorer}), REINFORCE `first_step={s.first_step}`, {s.episodes} episodes in batches of "
        f"{s.batch_episodes}, lr {s.lr:g}{learner}, encoder {s.encoder}{surface}, "
        f"{s.n_train} training items; greedy on {s.n_eval} held-out items (test split). Seeds: "
        f"{', '.join(map(str, seeds)) or 'none yet'}.",
        "",
        "`six`: the router trained without the held-out agents, on its own pool. `unseen`: the same router "
        "with the held-out agents added (scored by their text and card). `retrained`: a router trained on "
        "the whole pool. Expected return: each item's grade replaced by its probability given the visible "
        "score (no luck of the draws; on a pool of real models nothing knows it: the realised return, and "
        "the optimum is the per-item oracle).",
        "",
        "| seed | arm | accuracy | return | expected return | cost | held-out agents' share |",
        "|---:|---|---:|---:|---:|---:|---:|",
    ]
    for r in runs:
        for arm in ("six", "unseen", "retrained"):
            m = r[arm]
            share = sum(m["shares"].get(h, 0.0) for h in s.held)
            lines.append(
                f"| {r['seed']} | {arm} | {m['accuracy']:.3f} | {m['return']:.4f} | "
                f"{m['expected_return']:.4f} | {m['cost']:.3f} | {share:.0%} |"
            )
    for name, key in (("optimum, whole pool", "optimum_full"), ("optimum, training pool", "optimum_six")):
        m = ref[key]
        share = sum(m["shares"].get(h, 0.0) for h in s.held)
        lines.append(
            f"| - | {name} | {m['accuracy']:.3f} | {m['return']:.4f} | {m['expected_return']:.4f} | "
            f"{m['cost']:.3f} | {share:.0%} |"
        )
    summary: dict[str, Any] = {"seeds": seeds, "settings": asdict(s), "per_seed": []}
    if runs:
        lines += [
            "",
            "Share of the return gain from adding the held-out agents that the unseen router captures, "
            "`(unseen - six) / (retrained - six)`:",
            "",
            "| seed | realised return | expected return |",
            "|---:|---:|---:|",
        ]
        for r in runs:
            row = {
                "seed": r["seed"],
                **{
                    f"captured_{k}": gain_captured(r["six"][k], r["unseen"][k], r["retrained"][k])
                    for k in ("return", "expected_return")
                },
            }
            summary["per_seed"].append(row)
            lines.append(
                f"| {r['seed']} | {_pct(row['captured_return'])} | {_pct(row['captured_expected_return'])} |"
            )
        for k in ("return", "expected_return"):
            means = {arm: _mean(runs, arm, k) for arm in ("six", "unseen", "retrained")}
            summary[f"mean_{k}"] = means
            summary[f"captured_{k}"] = gain_captured(means["six"], means["unseen"], means["retrained"])
        got, got_e = _pct(summary["captured_return"]), _pct(summary["captured_expected_return"])
        lines.append(f"| mean of seeds | {got} | {got_e} |")
        opt_gain = ref["optimum_full"]["expected_return"] - ref["optimum_six"]["expected_return"]
        summary["optimum_gain_expected"] = opt_gain
        e = summary["mean_expected_return"]
        lines += [
            "",
            f"The optimum's own gain from the held-out agents: {opt_gain:+.4f} expected return "
            f"({ref['optimum_six']['expected_return']:.4f} -> {ref['optimum_full']['expected_return']:.4f}); "
            f"the routers' mean gains: unseen {e['unseen'] - e['six']:+.4f}, "
            f"retrained {e['retrained'] - e['six']:+.4f}.",
            "",
            "Share of items routed to each agent (mean over seeds):",
            "",
            "| agent | six | unseen | retrained | optimum (whole pool) |",
            "|---|---:|---:|---:|---:|",
        ]
        for name in ref["optimum_full"]["shares"]:
            cells = [
                f"{np.mean([r[arm]['shares'].get(name, 0.0) for r in runs]):.1%}"
                for arm in ("six", "unseen", "retrained")
            ]
            mark = " (held out)" if name in s.held else ""
            lines.append(
                f"| `{name}`{mark} | {' | '.join(cells)} | {ref['optimum_full']['shares'][name]:.1%} |"
            )
        lines += [
            "",
            "Routes by domain (pooled over seeds; the optimum once):",
            "",
            "| domain | unseen | retrained | optimum |",
            "|---|---|---|---|",
        ]
        for d in ref["optimum_full"]["routes_by_domain"]:
            cells = []
            for arm in ("unseen", "retrained"):
                c: Counter[str] = Counter()
                for r in runs:
                    c.update(r[arm]["routes_by_domain"].get(d, {}))
                cells.append(", ".join(f"`{a}` {n / sum(c.values()):.0%}" for a, n in c.most_common(3)))
            o = Counter(ref["optimum_full"]["routes_by_domain"][d])
            cells.append(", ".join(f"`{a}` {n / sum(o.values()):.0%}" for a, n in o.most_common(3)))
            lines.append(f"| {d} | {' | '.join(cells)} |")
    return "\n".join(lines) + "\n", summary


__all__ = [
    "EVAL_SEED",
    "OutcomeTable",
    "UnseenSettings",
    "gain_captured",
    "references",
    "report",
    "routes",
    "run_one",
    "train_router",
    "training_pool",
]
