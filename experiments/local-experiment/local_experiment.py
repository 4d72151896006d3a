"""The real-model experiment: a router trained with REINFORCE on the `local-v2` pool
against every fixed policy, on the same held-out items, priced in single-stream model seconds.

1. ``train``: ``puppeteer sweep`` over lambda x seeds (Hydra multirun) on ``mix-math-mmlu``'s first
   ``--n-train`` training items, ``max_steps=1`` by default (the policy picks one agent per item:
   routing; ``--max-steps 2 --signals --pool local-v2-cascade``: a cascade that reads the first
   answer's signals before it decides to stop or call another agent), ``min_steps=1``, cost model
   ``minutes`` (the pool's declared single-stream speeds), model selection on the training items
   (they are cached; the report uses each run's final policy). Each trained policy is then
   evaluated greedily on the first ``--n-eval`` test items (``--reevaluate``).
2. ``baselines``: every single agent, the random policy and a vote on the same items, through
   :func:`puppeteer.evaluation.evaluate.evaluate_policy` (the same items and sample indices as the table in
   ``experiments/baselines-local-v2/README.md``, so their calls replay from the response cache).
3. ``report``: ``report.md`` (accuracy with Wilson intervals, single-stream model seconds and calls per
   item, the Pareto front, the paired comparison of each trained lambda's seeds with the best single
   agent: exact McNemar on accuracy, paired bootstrap on model seconds) and ``pareto.png``.

Every step is resumable: finished runs are kept, and model calls replay from the response cache.

    python experiments/local-experiment/local_experiment.py --out runs/local-v2-exp  # all three steps
    python experiments/local-experiment/local_experiment.py --out runs/local-v2-exp --steps report
"""

from __future__ import annotations

import argparse
import json
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
from rich.console import Console

from puppeteer.agents.pool import Pool, load_pool
from puppeteer.analytics.headroom import Outcomes, domain_route, oracle_route, probe_cross_fit, probe_route
from puppeteer.analytics.plots import CostPoint, accuracy_vs_cost, pareto_front
from puppeteer.analytics.sweep import find_trained
from puppeteer.backends.cache import resolve_cache
from puppeteer.envs.encoders import make_encoder
from puppeteer.envs.observation import MAX_OBS_CHARS
from puppeteer.envs.trajectories import read_trajectories
from puppeteer.evaluation.evaluate import evaluate_policy, slug
from puppeteer.evaluation.stats import mcnemar_exact, paired_bootstrap, wilson_interval
from puppeteer.jobs.sweep import run_sweep
from puppeteer.tasks.suites import load_suite

log = logging.getLogger(__name__)

POOL = "local-v2"
SUITE = "mix-math-mmlu"
# --pool/--suite/--cost-model exist to smoke-test the pipeline on the simulator (e.g. --pool sim-paper
# --cost-model tokens); the experiment itself is the defaults
# the fixed policies: every single agent, random routing, and a vote of the three strongest solvers
EXTRA_BASELINES = ("random", "vote:qwen1.5b-cot,qwen1.5b-pot,qwen0.5b-pot")
# on a pool of independent solvers (`local-v2-cascade`), the fixed cascade a learned one is measured by
CASCADE_BASELINES = ("cascade:qwen1.5b-pot,qwen1.5b-cot",)


@dataclass(frozen=True)
class Row:
    """One evaluated policy: its per-item outcomes and single-stream model seconds."""

    label: str
    kind: str  # "trained" or "baseline"
    lam: float | None
    seed: int | None
    run_dir: Path
    items: pd.DataFrame  # task_id, domain, correct, model_s, calls

    @property
    def n(self) -> int:
        return len(self.items)

    @property
    def accuracy(self) -> float:
        return float(self.items["correct"].mean())

    @property
    def model_s(self) -> float:
        return float(self.items["model_s"].mean())


def per_item(run_dir: Path, pool: Pool) -> pd.DataFrame:
    """Outcome and single-stream model seconds of every item of an eval run (priced at ``pool``'s speeds)."""
    rows = []
    for t in read_trajectories(run_dir / "trajectories.jsonl"):
        rows.append(
            {
                "task_id": t.task_id,
                "domain": t.task_id.split("/")[0],
                "correct": t.correct,
                "model_s": pool.model_seconds(t.steps) or 0.0,
                "calls": len(t.steps),
            }
        )
    if not rows:
        raise ValueError(f"{run_dir} has no finished items")
    return pd.DataFrame(rows).drop_duplicates("task_id").set_index("task_id").sort_index()


# the learner these studies ran with (the training defaults before `puppeteer train` took the
# routing learner's): pinned, so their committed results stay reproducible; later overrides win
STUDY_LEARNER = (
    "trainer.first_step=sample",
    "trainer.entropy_coef=0.01",
    "trainer.entropy_final_fraction=1.0",
    "policy.task_dims=null",
    "policy.state_encoder=same",
)


def train(args: argparse.Namespace, out: Path, pool: Pool) -> None:
    overrides = [
        f"pool={args.pool}",
        *([f"pool.agents=[{args.agents}]"] if args.agents else []),
        f"suite={args.suite}",
        f"max_steps={args.max_steps}",
        "min_steps=1",
        *([f"phi={args.phi:g}"] if args.phi is not None else []),
        *(["policy.signals=true"] if args.signals else []),
        f"cost_model={args.cost_model}",
        f"suite.n_train={args.n_train}",
        "suite.val_split=train",
        f"suite.n_val={args.n_train}",
        f"suite.n_eval={args.n_eval}",
        f"policy.encoder={args.encoder}",
        f"trainer.episodes={args.episodes}",
        "trainer.batch_episodes=64",
        "trainer.eval_every=4",
        *STUDY_LEARNER,
        *args.overrides,
    ]
    lams = [float(x) for x in args.lam.split(",")]
    seeds = seed_list(args)
    done = {(r.value, r.seed) for r in find_trained(out / "sweep")} if (out / "sweep").is_dir() else set()
    run_sweep(
        lams,
        seeds,
        out / "sweep",
        overrides,
        track="puppeteer",
        cost="model_s" if pool.has_speeds else "tokens",
        n_eval=args.n_eval,
        train=any((lam, seed) not in done for lam in lams for seed in seeds),  # resume
        reevaluate=True,
    )


def seed_list(args: argparse.Namespace) -> list[int]:
    """The training seeds: ``--seed-list`` when given, else 0 .. ``--seeds`` - 1."""
    if args.seed_list:
        return [int(x) for x in str(args.seed_list).split(",")]
    return list(range(args.seeds))


def baseline_specs(pool: Pool) -> list[str]:
    """Every single agent but the verifier (it checks earlier work: alone it has none), plus the extras
    whose agents this pool has."""
    names = {a.name for a in pool.agents}

    def known(spec: str) -> bool:
        _, _, agents = spec.partition(":")
        return not agents or set(agents.split(",")) <= names

    extra = EXTRA_BASELINES + (CASCADE_BASELINES if pool.independent_solvers else ())
    return [f"single:{a.name}" for a in pool.agents if a.pattern != "verify"] + [s for s in extra if known(s)]


def baselines(args: argparse.Namespace, out: Path, pool: Pool) -> None:
    """The fixed policies on the held-out items, and every single agent on the training items too
    (they replay what training called) for the ceilings of the report."""
    runs = [("baselines", "test", args.n_eval, spec) for spec in baseline_specs(pool)]
    runs += [
        ("baselines-train", "train", args.n_train, s) for s in baseline_specs(pool) if s.startswith("single:")
    ]
    for folder, split, n, spec in runs:
        target = out / folder / slug(spec)
        done = target / "results.json"
        if done.is_file() and json.loads(done.read_text()).get("completed"):
            continue
        kind, _, members = spec.partition(":")
        max_steps = len(members.split(",")) if kind in ("vote", "cascade") else 1
        res = evaluate_policy(
            spec,
            pool,
            args.suite,
            cache=resolve_cache(pool, None, no_cache=False),  # the table's calls replay
            split=split,
            n=n,
            max_steps=max_steps,
            out_dir=target,
            overwrite=True,
            progress=not args.quiet,
        )
        log.info(
            "%s (%s): accuracy %.3f, %s single-stream s/item", spec, split, res.accuracy, res.mean_model_s
        )


def collect(out: Path, pool: Pool) -> list[Row]:
    rows = []
    for run in find_trained(out / "sweep"):
        if (run.run_dir / "eval" / "trajectories.jsonl").is_file():
            rows.append(
                Row(
                    f"trained lambda={run.value:g} seed {run.seed}",
                    "trained",
                    run.value,
                    run.seed,
                    run.run_dir / "eval",
                    per_item(run.run_dir / "eval", pool),
                )
            )
    for d in sorted((out / "baselines").glob("*/results.json")):
        res = json.loads(d.read_text())
        rows.append(Row(res["policy"], "baseline", None, None, d.parent, per_item(d.parent, pool)))
    return rows


def route_shares(run_dir: Path) -> str:
    """Which agents a run called, per domain (share of items)."""
    counts: dict[str, dict[str, int]] = {}
    for t in read_trajectories(run_dir / "trajectories.jsonl"):
        for s in t.steps:
            domain = t.task_id.split("/")[0]
            counts.setdefault(domain, {}).setdefault(s.agent_name, 0)
            counts[domain][s.agent_name] += 1
    parts = []
    for domain, c in sorted(counts.items()):
        total = sum(c.values())
        top = sorted(c.items(), key=lambda kv: -kv[1])
        parts.append(f"{domain}: " + ", ".join(f"{name} {k / total:.0%}" for name, k in top))
    return "; ".join(parts)


def outcomes(rows: Sequence[Row]) -> Outcomes:
    """The single agents' per-item outcomes of some rows, on the items they share."""
    runs = {
        r.label.removeprefix("single:"): {
            t: (bool(c), float(s))
            for t, c, s in zip(r.items.index, r.items["correct"], r.items["model_s"], strict=True)
        }
        for r in rows
        if r.label.startswith("single:")
    }
    return Outcomes.from_runs(runs)


def questions(suite: str, split: str, n: int) -> dict[str, str]:
    """Task id -> the text the router's encoder reads (the env's ``task`` observation)."""
    return {t.id: t.question[:MAX_OBS_CHARS] for t in load_suite(suite, split, n=n)}


def reward_phi(trained: Sequence[Row]) -> float:
    """The reward's phi in ``C_t = F * log(1 + t / phi)`` of the trained runs (null means max_steps)."""
    for r in trained:
        cfg = json.loads((r.run_dir.parent / "config.json").read_text())
        return float(cfg["phi"] or cfg["max_steps"])
    return 1.0  # train()'s default, max_steps=1


def ceilings(out: Path, pool: Pool, rows: Sequence[Row], args: argparse.Namespace) -> list[str]:
    """Reference routers fit on the training items' outcomes (see :mod:`puppeteer.analytics.headroom`),
    evaluated on the held-out items beside the trained runs, at each lambda."""
    train_rows = [
        Row(json.loads(d.read_text())["policy"], "baseline", None, None, d.parent, per_item(d.parent, pool))
        for d in sorted((out / "baselines-train").glob("*/results.json"))
    ]
    if not train_rows:
        log.warning(
            "no single-agent runs on the training items under %s: no ceilings", out / "baselines-train"
        )
        return []
    train, test = outcomes(train_rows), outcomes([r for r in rows if r.kind == "baseline"])
    if train.agents != test.agents:
        raise SystemExit(f"train and test runs have different agents: {train.agents} vs {test.agents}")
    encoder = make_encoder(args.encoder)
    q_train, q_test = questions(args.suite, "train", args.n_train), questions(args.suite, "test", args.n_eval)
    x_train = encoder.encode([q_train[t] for t in train.task_ids])
    x_test = encoder.encode([q_test[t] for t in test.task_ids])
    trained = [r for r in rows if r.kind == "trained"]
    lams = sorted({r.lam for r in trained if r.lam is not None}) or [0.0]
    if args.cost_model != "minutes":
        log.warning("ceilings price calls in model seconds; cost model %s: lambda 0 only", args.cost_model)
        lams = [0.0]
    phi = reward_phi(trained)
    mean_cost = train.model_s.mean(axis=0)
    best = max(range(len(test.agents)), key=lambda a: (test.correct[:, a].mean(), -test.model_s[:, a].mean()))
    lines = [
        "",
        f"What a router could learn here. Reference routers fit on the {len(train.task_ids)} training items' "
        f"single-agent outcomes and scored on the {len(test.task_ids)} held-out items, each maximising "
        "accuracy minus the reward's lambda * C (C = minutes of model time x ln 2 for one call): the "
        f"supervised probe (one logistic regression per agent on the router's own `{args.encoder}` question "
        "embeddings, every agent's label on every training item: more than REINFORCE observes), the best "
        "agent per domain as chosen on the training items, and the per-item oracle. Accuracy / single-stream "
        "model s per item:",
        "",
        "| lambda | trained (mean of seeds) | supervised probe | best agent per domain | oracle (per item) |",
        "|---:|---|---|---|---|",
    ]
    for lam in lams:
        pen = lam * np.log1p(1.0 / phi) * mean_cost / 60.0
        group = [r for r in trained if r.lam == lam]
        tr = (
            f"{np.mean([r.accuracy for r in group]):.3f} / {np.mean([r.model_s for r in group]):.1f}"
            if group
            else "-"
        )
        oracle_pen = lam * np.log1p(1.0 / phi) * test.model_s / 60.0
        cells = [
            probe_route(x_train, train, x_test, test, pen),
            domain_route(train, test, pen),
            oracle_route(test, oracle_pen),
        ]
        lines.append(
            f"| {lam:g} | {tr} | "
            + " | ".join(f"{r.accuracy(test):.3f} / {r.model_s(test):.1f}" for r in cells)
            + " |"
        )
    probe = probe_route(x_train, train, x_test, test)
    best_correct = test.correct[:, best]
    mc = mcnemar_exact(best_correct, probe.correct(test))
    by_c = {1.0: probe} | {c: probe_route(x_train, train, x_test, test, c=c) for c in (0.1, 10.0)}
    lines += [
        "",
        f"At lambda 0 the probe routes {', '.join(f'{k} {v:.0%}' for k, v in probe.shares(test).items())}; "
        f"against the best single agent `{test.agents[best]}` ({best_correct.mean():.3f}): "
        f"{mc.diff:+.3f}, exact McNemar p = {mc.p_value:.3g} ({mc.only_a} / {mc.only_b}). "
        "Regularisation (logistic C) 0.1 / 1 / 10: "
        + " / ".join(f"{by_c[c].accuracy(test):.3f}" for c in (0.1, 1.0, 10.0))
        + f". With more labels (5-fold cross-fit: each fifth of the held-out items routed by a probe fit on "
        f"the training items and the other four fifths, {len(train.task_ids) + len(test.task_ids) * 4 // 5} "
        f"items): {probe_cross_fit(x_train, train, x_test, test).accuracy(test):.3f}.",
    ]
    return lines


def report(out: Path, pool: Pool, rows: Sequence[Row], suite: str = SUITE, extra: Sequence[str] = ()) -> str:
    base = [r for r in rows if r.kind == "baseline"]
    trained = [r for r in rows if r.kind == "trained"]
    if not base:
        raise SystemExit(f"no baseline runs under {out / 'baselines'}: run the baselines step first")
    n = {r.n for r in rows}
    singles = [r for r in base if r.label.startswith("single:")]
    best = max(singles, key=lambda r: (r.accuracy, -r.model_s))
    points = [
        CostPoint(r.label, r.model_s, r.accuracy, *wilson_interval(int(r.items["correct"].sum()), r.n))
        for r in rows
    ]
    lams = sorted({r.lam for r in trained if r.lam is not None})
    mean_points = []
    for lam in lams:
        group = [r for r in trained if r.lam == lam]
        acc = float(np.mean([r.accuracy for r in group]))
        sd = float(np.std([r.accuracy for r in group], ddof=1)) if len(group) > 1 else 0.0
        mean_points.append(
            CostPoint(
                f"trained lambda={lam:g} (mean of {len(group)})",
                float(np.mean([r.model_s for r in group])),
                acc,
                acc - sd,
                acc + sd,
            )
        )
    front = {p.label for p in pareto_front([*points, *mean_points])}
    lines = [
        f"Pool `{pool.name}` (backend {'+'.join(pool.backends())}), suite `{suite}` test split, the same "
        f"{'/'.join(str(x) for x in sorted(n))} items for every policy. Model seconds are single-stream: "
        "every call priced at the pool's declared speeds (`prefill_tps`, `decode_tps`), independent of "
        "batching and load.",
        "",
        "| policy | n | accuracy (95% Wilson) | single-stream model s/item | calls/item | Pareto |",
        "|---|---:|---|---:|---:|:-:|",
    ]
    for r in sorted(rows, key=lambda r: (r.kind != "trained", r.lam or 0, r.seed or 0, r.label)):
        lo, hi = wilson_interval(int(r.items["correct"].sum()), r.n)
        name = r.label.replace("|", "\\|")
        lines.append(
            f"| `{name}` | {r.n} | {r.accuracy:.3f} [{lo:.3f}, {hi:.3f}] | {r.model_s:.1f} | "
            f"{r.items['calls'].mean():.2f} | {'*' if r.label in front else ''} |"
        )
    for p in mean_points:
        lines.append(
            f"| {p.label} | - | {p.accuracy:.3f} (+- {p.accuracy - p.ci_low:.3f} sd) | {p.cost:.1f} | - "
            f"| {'*' if p.label in front else ''} |"
        )
    lines += [
        "",
        f"Best single agent: `{best.label}` ({best.accuracy:.3f}, {best.model_s:.1f} s/item). Each "
        "trained run against it, paired item by item (B = trained, A = best single agent):",
        "",
        "| trained run | accuracy B - A | McNemar p (A only / B only) | model s B - A [95% bootstrap] "
        "| B/A model time | routes |",
        "|---|---:|---|---|---:|---|",
    ]
    for r in trained:
        both = best.items.merge(r.items, left_index=True, right_index=True, suffixes=("_a", "_b"))
        mc = mcnemar_exact(both["correct_a"].to_numpy(), both["correct_b"].to_numpy())
        d = paired_bootstrap(both["model_s_a"].to_numpy(), both["model_s_b"].to_numpy())
        ratio = d.mean_b / d.mean_a if d.mean_a else float("nan")
        lines.append(
            f"| {r.label} | {mc.diff:+.3f} | {mc.p_value:.3g} ({mc.only_a} / {mc.only_b}) | {d.diff:+.1f} "
            f"[{d.ci_low:+.1f}, {d.ci_high:+.1f}] | {ratio:.2f} | "
            f"{route_shares(r.run_dir)} |"
        )
    covered = (
        pd.concat([r.items["correct"].rename(r.label) for r in singles], axis=1).fillna(False).any(axis=1)
    )
    lines += [
        "",
        f"Headroom: some single agent solves {int(covered.sum())} of {len(covered)} items (a per-item "
        f"oracle router's accuracy {covered.mean():.3f}); the best single agent solves "
        f"{int(best.items['correct'].sum())}. On MMLU this counts lucky guesses too (four options: an "
        "agent answering at random is right a quarter of the time).",
        *extra,
    ]
    sizes = "/".join(map(str, sorted(n)))
    backend = "+".join(pool.backends())
    title = (
        f"{pool.name} on {suite} (test, n={sizes}): trained routers vs fixed policies [backend: {backend}]"
    )
    accuracy_vs_cost(
        {suite: [*points, *mean_points]},
        out / "pareto.png",
        title,
        "single-stream model seconds per item (declared speeds)",
    )
    text = "\n".join(lines) + "\n"
    (out / "report.md").write_text(text)
    return text


def main(argv: Sequence[str] | None = None) -> None:
    """The experiment's command line (``experiments/local-experiment/local_experiment.py``); ``argv``:
    ``sys.argv[1:]``."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", default="runs/local-v2-exp")
    p.add_argument(
        "--steps",
        nargs="+",
        default=["train", "baselines", "report"],
        choices=["train", "baselines", "report"],
    )
    p.add_argument("--lam", default="0,0.1,0.3,1")
    p.add_argument("--seeds", type=int, default=3, help="train seeds 0 .. SEEDS-1")
    p.add_argument(
        "--seed-list",
        default=None,
        help="comma-separated seeds to train instead (e.g. 1,2; overrides --seeds)",
    )
    p.add_argument("--n-train", type=int, default=100)
    p.add_argument("--n-eval", type=int, default=100, help="held-out test items (mix: half GSM8K, half MMLU)")
    p.add_argument("--episodes", type=int, default=2048)
    p.add_argument("--encoder", default="minilm")
    p.add_argument(
        "--max-steps",
        type=int,
        default=1,
        help="agents per item the router may call (1: routing; 2 on local-v2-cascade: cascades)",
    )
    p.add_argument("--phi", type=float, default=None, help="the reward's phi (default: max_steps)")
    p.add_argument(
        "--signals",
        action="store_true",
        help="the router also reads obs['signals'] (puppeteer/tasks/signals.py)",
    )
    p.add_argument("--quiet", action="store_true")
    p.add_argument("--pool", default=POOL)
    p.add_argument("--suite", default=SUITE)
    p.add_argument("--cost-model", default="minutes")
    p.add_argument(
        "--agents",
        default=None,
        help="comma-separated agents of the pool the router chooses among (default: all); the baselines "
        "are the same agents",
    )
    p.add_argument("overrides", nargs="*", help="more Hydra overrides for the training runs")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    pool = load_pool(args.pool)
    if args.agents:
        pool = pool.subset(args.agents.split(","))
    if "train" in args.steps:
        train(args, out, pool)
    if "baselines" in args.steps:
        baselines(args, out, pool)
    if "report" in args.steps:
        rows = collect(out, pool)
        # the command's output: the report it also wrote to report.md
        text = report(out, pool, rows, args.suite, ceilings(out, pool, rows, args))
        Console(soft_wrap=True).print(text, markup=False, highlight=False, emoji=False)


if __name__ == "__main__":
    main()
