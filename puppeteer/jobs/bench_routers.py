"""``puppeteer outcomes routers``: the field's routers and the learned step router on one imported table.

Every router is fitted on the training split only and swept over one grid of cost knobs ``lam`` on
the held-out split; its chosen model per query is scored from the logged table (the score itself,
fractional scores included, and the logged cost). The learned router is the project's REINFORCE step
router with the price of cost as an input (one lambda-conditioned policy per seed, one call per
episode, every first action tried per item), trained on the imported pool's training split through
the environment (the ``logged`` backend) and queried greedily at each ``lam``. Metrics per router and
seed: :mod:`puppeteer.analytics.router_metrics`. Writes ``results.json``, ``routers.md`` and
``routers.png`` into the output folder.
"""

from __future__ import annotations

import hashlib
import json
import logging
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from puppeteer.analytics import router_metrics as rm
from puppeteer.analytics.field_routers import FIELD_ROUTERS, Prediction, RouterData
from puppeteer.errors import UserError
from puppeteer.evaluation.stats import mcnemar_exact
from puppeteer.outcomes.store import load_logged
from puppeteer.outcomes.table import LoggedTable

log = logging.getLogger(__name__)

LEARNED = "learned (REINFORCE, lambda-conditioned)"
PGR_TARGETS = (0.5, 0.8, 0.95)


@dataclass(frozen=True)
class LearnedConfig:
    """The learned step router's training (kept short: minutes on two cores)."""

    episodes: int = 30000
    batch_episodes: int = 144
    lr: float = 3e-3
    hidden: int = 128
    entropy: float = 0.01
    lam_relabel: int = 8
    # how the first decision's exact loss weighs each model: "policy" (its probability: the policy
    # gradient) or "uniform" (a policy that has turned to one model still learns where another pays)
    first_weights: str = "policy"


@dataclass(frozen=True)
class BenchConfig:
    folder: Path  # an imported table's folder (pool.yaml, suite.yaml, logged.csv.gz)
    out: Path
    train_split: str = "train"
    test_split: str = "test"
    seeds: tuple[int, ...] = (0, 1, 2, 3, 4)
    encoder: str = "minilm"
    n_lams: int = 24
    routers: tuple[str, ...] = tuple(FIELD_ROUTERS)
    learned: LearnedConfig | None = field(default_factory=LearnedConfig)


# --------------------------------------------------------------------------- data


def embed(texts: Sequence[str], encoder: str, cache_dir: Path) -> np.ndarray:
    """The texts' embeddings (L2-normalised rows), cached in ``cache_dir`` by encoder and texts."""
    digest = hashlib.sha256(("\x1e".join([encoder, *texts])).encode("utf-8")).hexdigest()[:16]
    path = cache_dir / f"embed-{encoder}-{digest}.npy"
    if path.is_file():
        return np.load(path)
    from puppeteer.envs.encoders import make_encoder

    t0 = time.perf_counter()
    x = make_encoder(encoder).encode(list(texts)).astype(np.float32)
    log.info("embedded %d texts with %s in %.0f s", len(texts), encoder, time.perf_counter() - t0)
    cache_dir.mkdir(parents=True, exist_ok=True)
    np.save(path, x)
    return x


def router_data(table: LoggedTable, x: np.ndarray) -> RouterData:
    return RouterData(x, table.tasks, table.score, table.cost)


def lam_grid(train: LoggedTable, n: int) -> np.ndarray:
    """Cost knobs in quality per USD: 0, then log-even from where the priciest model's mean cost weighs
    0.001 of quality to where it weighs 1 (every router then sends all to its cheapest pick)."""
    unit = float(train.cost.mean(axis=0).max())
    if unit <= 0:
        return np.zeros(1)
    return np.r_[0.0, np.geomspace(1e-3 / unit, 1.0 / unit, n - 1)]


@dataclass(frozen=True)
class Point:
    lam: float
    cost: float  # mean USD per query
    quality: float  # mean score
    accuracy: float  # share of queries with score 1
    shares: dict[str, float]


def points_of(choices: Sequence[np.ndarray], lams: np.ndarray, test: LoggedTable) -> list[Point]:
    rows = np.arange(len(test))
    out = []
    for lam, pick in zip(lams, choices, strict=True):
        s, c = test.score[rows, pick], test.cost[rows, pick]
        counts = np.bincount(pick, minlength=len(test.models)) / len(test)
        shares = {m: round(float(v), 4) for m, v in zip(test.models, counts, strict=True) if v > 0}
        out.append(Point(float(lam), float(c.mean()), float(s.mean()), float((s >= 1.0).mean()), shares))
    return out


# --------------------------------------------------------------------------- learned router


def learned_choices(
    folder: Path,
    lams: np.ndarray,
    seed: int,
    cfg: LearnedConfig,
    encoder: Any,
    encoder_name: str,
    run_dir: Path,
    splits: tuple[str, str],
) -> tuple[list[np.ndarray], float]:
    """Train one lambda-conditioned step router on the training split; its greedy choice per held-out
    query at each ``lam`` (quality per USD), and the training seconds."""
    from puppeteer.agents.pool import load_pool
    from puppeteer.envs.build import EnvConfig, build_env
    from puppeteer.envs.rollout import run_lockstep
    from puppeteer.jobs.builder import env_copies
    from puppeteer.policies.puppeteer import PuppeteerPolicy
    from puppeteer.policies.puppeteer_config import PolicyConfig
    from puppeteer.train.reinforce import ReinforceConfig, train

    cents = lams / 100.0  # the env prices cost in US cents
    hi = float(cents.max()) or 1.0
    pool = load_pool(folder / "pool.yaml")
    suite = str(folder / "suite.yaml")
    env_cfg = EnvConfig(mode="step", lam=0.0, lam_range=(0.0, hi), max_steps=1, min_steps=1, cost_model="usd")
    pol_cfg = PolicyConfig(
        encoder=encoder_name, hidden=cfg.hidden, max_steps=1, min_steps=1, lam_range=(0.0, hi)
    )
    trainer = ReinforceConfig(
        episodes=cfg.episodes,
        batch_episodes=cfg.batch_episodes,
        lr=cfg.lr,
        entropy_coef=cfg.entropy,
        first_step="all",
        first_weights=cfg.first_weights,
        lam_relabel=cfg.lam_relabel,
        eval_every=10**9,
        seed=seed,
    )
    env = build_env(env_cfg, pool=pool, suite=suite, split=splits[0])
    policy = PuppeteerPolicy(pool, pol_cfg, encoder=encoder, seed=seed)
    t0 = time.perf_counter()
    train(env, policy, trainer, run_dir)
    seconds = time.perf_counter() - t0
    policy.config = replace(policy.config, greedy=True)
    test_env = build_env(replace(env_cfg, lam_range=(0.0, hi)), pool=pool, suite=suite, split=splits[1])
    table = load_logged(folder)
    col = {m: j for j, m in enumerate(table.models)}
    n = len(test_env.tasks)
    copies = env_copies(test_env, 32)
    out = []
    for lam in cents:
        eps = run_lockstep(copies, policy, [(i, i) for i in range(n)], greedy=True, lams=[float(lam)] * n)
        out.append(np.array([col[pool.agent(e.actions[0]).model.target] for e in eps]))
    # the env's tasks are in its own seeded order: put the choices in the table's order
    ids = [t.meta["prompt_id"] for t in test_env.tasks]
    pos = {p: i for i, p in enumerate(table.split(splits[1]).prompt_ids)}
    order = np.argsort([pos[p] for p in ids])
    return [c[order] for c in out], seconds


# --------------------------------------------------------------------------- metrics


def references(train: LoggedTable, test: LoggedTable) -> dict[str, Any]:
    """The fixed points every router is measured against, chosen on train, valued on test."""
    q_tr, c_tr = train.score.mean(axis=0), train.cost.mean(axis=0)
    strong = int(np.lexsort((c_tr, -q_tr))[0])  # best training quality, the cheaper on a tie
    weak = int(np.lexsort((-q_tr, c_tr))[0])  # cheapest, the better on a tie
    q_te, c_te = test.score.mean(axis=0), test.cost.mean(axis=0)
    return {
        "strong": test.models[strong],
        "weak": test.models[weak],
        "strong_point": (float(c_te[strong]), float(q_te[strong])),
        "weak_point": (float(c_te[weak]), float(q_te[weak])),
        "strong_correct": test.score[:, strong] >= 1.0,
        "oracle_quality": float(test.score.max(axis=1).mean()),
        "oracle_accuracy": float((test.score >= 1.0).any(axis=1).mean()),
        "c_lo": float(test.cost.min(axis=1).mean()),
        "c_hi": float(test.cost.max(axis=1).mean()),
        "singles": {
            m: {
                "cost": float(c_te[j]),
                "quality": float(q_te[j]),
                "accuracy": float((test.score[:, j] >= 1).mean()),
            }
            for j, m in enumerate(test.models)
        },
    }


def metrics(
    points: Sequence[Point], choices: Sequence[np.ndarray], test: LoggedTable, ref: dict[str, Any]
) -> dict[str, Any]:
    h = rm.hull([p.cost for p in points], [p.quality for p in points])
    (cw, qw), (cs, qs) = ref["weak_point"], ref["strong_point"]
    rows = np.arange(len(test))
    # the McNemar claim: a point at no more than the strong model's cost, +3 points of accuracy, p < 0.01
    best_gain: dict[str, Any] | None = None
    for p, pick in zip(points, choices, strict=True):
        if p.cost > cs * (1 + 1e-9):
            continue
        right = test.score[rows, pick] >= 1.0
        mc = mcnemar_exact(ref["strong_correct"], right)  # only_b: the router right, the strong one wrong
        b, c, pval = mc.only_b, mc.only_a, mc.p_value
        gain = p.accuracy - float(ref["strong_correct"].mean())
        if best_gain is None or gain > best_gain["gain"]:
            best_gain = {"lam": p.lam, "gain": gain, "cost": p.cost, "wins": b, "losses": c, "p": pval}
    return {
        "aiq": rm.aiq(h, ref["c_lo"], ref["c_hi"]),
        "apgr": rm.apgr(h, (cw, qw), (cs, qs)) if qs > qw else None,
        "gap_closed": rm.gap_closed(h, (cs, qs), ref["oracle_quality"]),
        "cost_to_reach": {
            f"{int(x * 100)}%": rm.cost_to_reach(h, qw + x * (qs - qw)) if qs > qw else None
            for x in PGR_TARGETS
        },
        "top_quality": max(p.quality for p in points),
        "top_accuracy": max(p.accuracy for p in points),
        "vs_strong": best_gain,
        "hull": {"cost": h.cost, "quality": h.quality},
    }


# --------------------------------------------------------------------------- run


def run_bench(cfg: BenchConfig) -> dict[str, Any]:
    table = load_logged(cfg.folder)
    train_t, test_t = table.split(cfg.train_split), table.split(cfg.test_split)
    overlap = set(train_t.prompts) & set(test_t.prompts)
    if overlap:
        raise UserError(
            f"{len(overlap)} prompts are in both {cfg.train_split} and {cfg.test_split}: "
            "re-import with --dedupe-splits"
        )
    unknown = sorted(set(cfg.routers) - set(FIELD_ROUTERS))
    if unknown:
        raise UserError(f"unknown routers {unknown}; known: {', '.join(FIELD_ROUTERS)}")
    cfg.out.mkdir(parents=True, exist_ok=True)
    x = embed(table.prompts, cfg.encoder, cfg.out / "cache")
    splits = np.array(table.splits)
    x_tr, x_te = x[splits == cfg.train_split], x[splits == cfg.test_split]
    train_d, test_d = router_data(train_t, x_tr), router_data(test_t, x_te)
    lams = lam_grid(train_t, cfg.n_lams)
    ref = references(train_t, test_t)
    runs: dict[str, list[dict[str, Any]]] = {}
    for seed in cfg.seeds:
        for name in cfg.routers:
            t0 = time.perf_counter()
            pred: Prediction = FIELD_ROUTERS[name](train_d, test_d, seed)
            choices = [pred.route(lam) for lam in lams]
            pts = points_of(choices, lams, test_t)
            entry = metrics(pts, choices, test_t, ref) | {
                "seed": seed,
                "seconds": time.perf_counter() - t0,
                "points": [asdict(p) for p in pts],
            }
            runs.setdefault(name, []).append(entry)
            log.info("seed %d %s: AIQ %.4f", seed, name, entry["aiq"])
        if cfg.learned is not None:
            encoder = _warm_encoder(cfg.encoder, table.prompts, x)
            choices, secs = learned_choices(
                cfg.folder,
                lams,
                seed,
                cfg.learned,
                encoder,
                cfg.encoder,
                cfg.out / "runs" / f"seed{seed}",
                (cfg.train_split, cfg.test_split),
            )
            pts = points_of(choices, lams, test_t)
            entry = metrics(pts, choices, test_t, ref) | {
                "seed": seed,
                "seconds": secs,
                "points": [asdict(p) for p in pts],
            }
            runs.setdefault(LEARNED, []).append(entry)
            log.info("seed %d learned: AIQ %.4f (%.0f s)", seed, entry["aiq"], secs)
    results = {
        "folder": str(cfg.folder),
        "config": {k: (str(v) if isinstance(v, Path) else v) for k, v in asdict(cfg).items()},
        "n_train": len(train_t),
        "n_test": len(test_t),
        "models": list(table.models),
        "lams_per_usd": lams.tolist(),
        "references": {k: v for k, v in ref.items() if k != "strong_correct"},
        "runs": runs,
    }
    (cfg.out / "results.json").write_text(json.dumps(results, indent=1, default=_plain), encoding="utf-8")
    from puppeteer.jobs.bench_report import markdown, plot

    (cfg.out / "routers.md").write_text(markdown(results), encoding="utf-8")
    plot(results, cfg.out / "routers.png")
    return results


def _warm_encoder(name: str, texts: Sequence[str], x: np.ndarray) -> Any:
    """A cached encoder that already holds these texts' embeddings (the policy encodes nothing again)."""
    from puppeteer.envs.encoders import CachedEncoder, make_encoder

    known = {t: x[i] for i, t in enumerate(texts)}
    fallback: list[CachedEncoder] = []  # made once, on the first text not embedded yet (agent cards)

    def fn(batch: list[str]) -> np.ndarray:
        missing = [t for t in batch if t not in known]
        if missing:
            if not fallback:
                fallback.append(make_encoder(name))
            known.update(zip(missing, fallback[0].encode(missing), strict=True))
        return np.stack([known[t] for t in batch])

    return CachedEncoder(fn, x.shape[1], max_items=max(100_000, len(texts) + 1000))


def _plain(o: Any) -> Any:
    if isinstance(o, np.generic):
        return o.item()
    if isinstance(o, np.ndarray):
        return o.tolist()
    raise TypeError(type(o).__name__)
