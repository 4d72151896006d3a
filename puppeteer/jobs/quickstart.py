"""``puppeteer quickstart``: the main job on the embedded default, end to end on real local models.

Trains the step-wise puppeteer with REINFORCE on a small GSM8K + MMLU training split
using a subset of the ``local-v2`` pool (llama.cpp models that ship in PyPI packages: chain of
thought and program of thought on the 1.5B, quick answers from the 0.5B and SmolLM2),
evaluates it on held-out items against baselines, priced in single-stream model seconds, and
writes a report with the accuracy-vs-model-time plot and its Pareto front. Real-model
training is made affordable by greedy decoding plus the SQLite response cache (an
(item, agents-so-far) prefix is computed once and replayed afterwards), short
max-token budgets and llama.cpp's KV-cache reuse of shared prompt prefixes.
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from puppeteer.agents.pool import Pool, load_pool
from puppeteer.analytics.plots import CostPoint, accuracy_vs_cost, agent_usage, learning_curve
from puppeteer.backends import REPLAY_ENV
from puppeteer.backends.cache import default_response_cache
from puppeteer.backends.llamacpp import available_cpus
from puppeteer.backends.replay import load_table
from puppeteer.envs.build import BackendSpec, EnvConfig, build_env
from puppeteer.envs.rollout import Episode
from puppeteer.envs.trajectories import read_trajectories
from puppeteer.evaluation.evaluate import evaluate_policy
from puppeteer.evaluation.results import EvalResult
from puppeteer.jobs.builder import StepJob
from puppeteer.jobs.quickstart_report import ONE_CALL, TRAINED, UNITS, cost_axis, headline, trained_rows
from puppeteer.policies.puppeteer import PuppeteerPolicy
from puppeteer.policies.puppeteer_config import PolicyConfig
from puppeteer.policies.rules import FITTED_RULES
from puppeteer.tasks import load_suite
from puppeteer.train.reinforce import ROUNDED_UP, ReinforceConfig, TrainState, train
from puppeteer.types import Task
from puppeteer.utils.progress import ProgressReporter
from puppeteer.utils.rundir import claim


@dataclass(frozen=True)
class QuickstartConfig:
    # `local-mix`: mixed traffic (GSM8K, MMLU, integer arithmetic, HumanEval) on eight agents of
    # the two Qwen2.5-Coder models. Every agent's response on the items below ships with the package
    # (agents/local-mix.replay/), so the run replays real-model outputs without loading a model;
    # `--replay off` calls the models again (about 1.5 h on 2 cores for these items).
    pool: str = "local-mix"
    agents: tuple[str, ...] = (
        "qwen1.5b-cot",
        "qwen1.5b-pot",
        "qwen1.5b-direct",
        "qwen1.5b-code",
        "qwen0.5b-pot",
        "qwen0.5b-direct",
        "qwen0.5b-calc",
        "qwen0.5b-code",
    )
    suite: str = "mix-local"
    # the shipped table's shards: 200 training items and every one of the suite's 320 held-out items
    # (80 of each kind); experiments/local-mix/README.md section 5 is this setting at 3 seeds
    n_train: int = 200
    n_eval: int = 320
    episodes: int = 65536
    # 512 episodes per update: 64 training items, each with every agent tried first (first_step=all),
    # so a per-kind difference of a few points rises above the draws' noise
    # (experiments/sim-routing/README.md)
    batch_episodes: int = 512
    group_size: int = 4
    # `all`: every group tries each agent first, the exact gradient of the routing decision (the
    # table makes the calls free); `sample`: each group draws its first agents
    first_step: str = "all"
    # max_steps=1: the policy routes each item to one agent
    max_steps: int = 1
    # Call at least one agent. With the Terminator open at step 0, short noisy real-model runs can
    # learn to stop at once (return 0 beats the cost of failed calls on hard items): measured, 0/10.
    min_steps: int = 1
    # lambda 1 per model minute: at 0.1 the routers bought chain of thought for +0.5-1 point at 2x the
    # model time (experiments/local-mix/README.md section 4)
    lam: float = 1.0
    # `minutes`: each call costs its single-stream model minutes at the pool's declared speeds, so
    # lambda buys model time (a pool without declared speeds fails early with this; set `tokens`)
    cost_model: str = "minutes"
    encoder: str = "minilm"
    # the question read on its 8 principal directions (fit on the training items): with 200 items the
    # full 384-dimensional embedding let the router memorise items instead of kinds (section 4b)
    task_dims: int | None = 8
    # True (task_dims None): the question read only as its kind (classified), the input a
    # per-kind rule reads (experiments/steps-learner/README.md)
    by_kind: bool = False
    baselines: tuple[str, ...] = (
        "single:qwen1.5b-pot",
        "single:qwen1.5b-cot",
        "single:qwen0.5b-code",
        "single:qwen0.5b-direct",
        "random",
    )
    # the rules a learned router has to beat, chosen on the run's training items at its lambda and cost
    # model with no learning (puppeteer/policies/rule_fit.py): per kind the best of one agent, an
    # escalation on an answer signal, a recorded chain or a vote of three; and the best single agent
    rules: tuple[str, ...] = ("best-rule", "best-single")
    rule_max_steps: int = 3  # the rules' own call budget (a vote of three)
    seed: int = 0
    # routers trained: seeds seed, seed + 1, ...; the report gives each seed's row and the headline the
    # mean and the worst seed against the best rule and the best single agent (each seed about 6 min)
    seeds: int = 1
    n_threads: int | None = None  # llama.cpp threads; None = all available CPUs
    # llama.cpp decodes the pending calls of a model together; False: one call at a time,
    # the path before batching, kept for side-by-side benchmarks (benchmarks/bench_end_to_end.py)
    batching: bool = True
    # episodes stepped together; None: the whole training batch (batch_episodes), so all of an update's
    # distinct calls are pending at once and batch per model (with first_step=all the first update holds
    # every (item, agent) call). With 64 of a 512-episode batch, an update ran as 8 chunks, each waiting
    # for its slowest call while its few calls were split over two models (docs/benchmarks.md).
    # Results do not depend on it (each episode has its own seed).
    parallel_envs: int | None = None
    # the decision after the router's call (experiments/local-mix/README.md section 7): the trained
    # one-call router kept
    # fixed as the first decision, a second decision learned on top of it: every second action (stopping
    # included) tried after the router's choice, fitted to softmax(return / after_call_target), reading
    # who acted and the answer signals (with the visible checks: a HumanEval answer run on its docstring's
    # examples); 0 episodes (or max_steps > 1): the router alone
    after_call_episodes: int = 131072
    after_call_target: float = 0.1
    after_call_lr: float = 0.01
    # backward induction (0: off). With episodes here, the decision after a call is learned after
    # *every* first call (the router still fixed, every pair of actions tried: |A| x (|A| + 1) episodes
    # an item), then the first decision again, from the router, on what each first call is worth when
    # the learned decision after it acts (that decision fixed): a router learned as if its call were the
    # last picks the best single call, not the best call to escalate from (experiments/steps-learner)
    first_again_episodes: int = 0
    # torch threads for the router's training and the question encoder: the thread count changes float
    # reductions, so the same seed trains another router on another count (measured: 0.666 with 1
    # thread, 0.650 with 2); 1 makes the result the same on every machine, and small networks on small
    # batches run no slower on one thread
    torch_threads: int = 1
    # every training episode in train*/trajectories.jsonl: off by default (the two stages' 196,000
    # episodes wrote 423 MB); the held-out evaluations always keep theirs (eval/*/trajectories.jsonl)
    trajectories: bool = False

    def __post_init__(self) -> None:
        if self.seeds < 1:
            raise ValueError(f"seeds must be at least 1, got {self.seeds}")
        if self.rule_max_steps < 1:
            raise ValueError(f"rule_max_steps must be at least 1, got {self.rule_max_steps}")
        if self.first_again_episodes < 0 or (
            self.first_again_episodes and not (self.after_call_episodes and self.max_steps == 1)
        ):
            raise ValueError(
                f"first_again_episodes={self.first_again_episodes}: 0 (off), or episodes for the first call "
                "learned again after the decision after a call (after_call_episodes > 0, max_steps 1)"
            )


def replay_note(pool: Pool) -> str | None:
    """One sentence on the pool's shipped outcome table as this run uses it (None without one)."""
    mode = os.environ.get(REPLAY_ENV, "on")
    if pool.replay is None or mode == "off":
        return None
    calls = len(load_table(pool.replay))
    return (
        f"Model calls are replayed from the shipped outcome table {pool.replay.name}/ ({calls} real-model "
        f"calls, replay {mode}): cache hits count them; `--replay off` calls the models again."
    )


def _row(name: str, r: EvalResult) -> dict[str, Any]:
    return {
        "policy": name,
        "accuracy": r.accuracy,
        "ci": [r.ci_low, r.ci_high],
        "calls": r.mean_calls,
        "tokens": r.mean_prompt_tokens + r.mean_completion_tokens,
        "model_s": r.mean_model_s,  # single-stream model seconds per item; None without declared speeds
        "wall_s": r.wall_s,
        "cache_hits": r.cache_hits,
        "cache_misses": r.cache_misses,
        "errors": r.n_errors,  # items whose episode raised: counted as wrong, each message in its record
    }


@contextmanager
def _torch_threads(n: int) -> Iterator[None]:
    """torch's intra-op threads set to ``n`` for the block, restored after."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)


class _GroupRounding(logging.Filter):
    """Drops the trainer's warning that a stage's episodes are not whole groups: the groups are the
    quickstart's own (every action tried on an item), and the report states the episodes each stage
    trained."""

    def filter(self, record: logging.LogRecord) -> bool:
        return record.msg != ROUNDED_UP


@contextmanager
def _own_group_sizes() -> Iterator[None]:
    logger = logging.getLogger("puppeteer.train.reinforce.trainer")
    quiet = _GroupRounding()
    logger.addFilter(quiet)
    try:
        yield
    finally:
        logger.removeFilter(quiet)


def run_quickstart(
    cfg: QuickstartConfig, out: str | Path, cache: str | Path | None = None, console: Any | None = None
) -> dict[str, Any]:
    with _torch_threads(cfg.torch_threads), _own_group_sizes(), claim(out):  # one writer at a time
        return _run_quickstart(cfg, out, cache, console)


def _run_quickstart(
    cfg: QuickstartConfig, out: str | Path, cache: str | Path | None, console: Any | None
) -> dict[str, Any]:
    from rich.markup import escape
    from rich.table import Table

    from puppeteer.utils.consoles import output_console

    console = console or output_console()
    run = Path(out)
    run.mkdir(parents=True, exist_ok=True)
    cache = Path(cache) if cache is not None else default_response_cache()
    start = time.perf_counter()
    pool = load_pool(cfg.pool).subset(cfg.agents)
    # the items in the suite's own order (seed 0), the ones the shipped table holds; `seed` varies the
    # training (its draws and initial weights) and the held-out episodes' sample seeds, not the items
    train_tasks = load_suite(cfg.suite, "train", n=cfg.n_train)
    eval_tasks = load_suite(cfg.suite, "test", n=cfg.n_eval)
    batch = max(cfg.group_size, min(cfg.batch_episodes, cfg.episodes) // cfg.group_size * cfg.group_size)
    job = StepJob(
        settings=EnvConfig(
            mode="step",
            lam=cfg.lam,
            max_steps=cfg.max_steps,
            min_steps=cfg.min_steps,
            cost_model=cfg.cost_model,
            samples_per_item=1,
        ),
        pool=pool,
        policy_config=PolicyConfig(
            encoder=cfg.encoder,
            max_steps=cfg.max_steps,
            min_steps=cfg.min_steps,
            task_dims=cfg.task_dims,
            by_kind=cfg.by_kind,
        ),
        trainer=ReinforceConfig(
            episodes=cfg.episodes,
            batch_episodes=batch,
            group_size=cfg.group_size,
            first_step=cfg.first_step,
            lr=0.003,
            eval_every=10**9,
            parallel_envs=cfg.parallel_envs or batch,
            seed=cfg.seed,
        ),
        suite=cfg.suite,
        seed=cfg.seed,
        # one decoding loop per model under one compute lock: llama.cpp may use every core
        backend=BackendSpec.of(
            {"llamacpp": {"n_threads": cfg.n_threads or available_cpus(), "batching": cfg.batching}}, cache
        ),
    )
    env = job.env(tasks=train_tasks, training=True)
    backend = env.executor.backend  # one set of loaded models for training, evaluation and baselines
    backend_name = ", ".join(pool.backends())  # every figure and table says which backend made it
    eval_backend = None if pool.needs_answer_key else backend  # held-out items need their own
    replay = replay_note(pool)
    console.print(
        f"[bold]puppeteer quickstart[/bold]: pool {escape(pool.name)} (backend {backend_name}), "
        f"{len(train_tasks)} train / {len(eval_tasks)} held-out items of {cfg.suite}; cache {cache}"
        + (f"\n{escape(replay)}" if replay else "")
    )
    seeds = [cfg.seed + i for i in range(cfg.seeds)]
    short = f"{short_pool_name(pool)}, {cfg.suite} [{backend_name}]"  # titles fit their figures
    rows, results = [], {}

    def add(name: str, spec: Any, max_steps: int, folder: str) -> None:
        r = _evaluate(cfg, spec, pool, eval_tasks, eval_backend, max_steps, run / "eval" / folder, console)
        results[name] = r
        rows.append(_row(name, r))

    first_run: _SeedRun | None = None
    for seed in seeds:
        sub = run if len(seeds) == 1 else run / f"seed{seed}"
        seed_job = job if seed == cfg.seed else job.seeded(seed)
        seed_env = (
            env
            if seed == cfg.seed
            else build_env(job.settings, pool=pool, suite=cfg.suite, tasks=train_tasks, backend=backend)
        )
        done = _train_seed(cfg, seed_job, seed_env, pool, train_tasks, backend, sub, console, backend_name)
        _curves(done, sub, short, cfg.first_step)
        first_run = first_run or done
        tail, folder = ("", "") if len(seeds) == 1 else (f" seed {seed}", f"-seed{seed}")
        for name, spec, max_steps in done.arms:
            add(name + tail, spec, max_steps, _slug(name) + folder)
    assert first_run is not None  # cfg.seeds >= 1
    for spec, max_steps in _baseline_specs(cfg):
        add(spec, spec, max_steps, _slug(spec))

    trained = trained_rows(rows)[0]["policy"]
    trained_dir = results[trained].out_dir
    trajs = list(read_trajectories(Path(trained_dir) / "trajectories.jsonl")) if trained_dir else []
    agent_usage(
        trajs,
        [a.name for a in pool.agents],
        run / "agent_usage.png",
        f"Trained router{'' if len(seeds) == 1 else f' (seed {cfg.seed})'}, held-out items: {short}",
    )
    key, cost_label = cost_axis(rows)
    accuracy_vs_cost(
        {f"held-out {cfg.suite} (n={len(eval_tasks)})": [_point(r, key) for r in rows]},
        run / "pareto.png",
        f"Trained router vs fixed policies: {short}",
        cost_label,
    )
    state, after = first_run.state, first_run.after
    summary = {
        "config": asdict(cfg),
        "backend": backend_name,
        "replay": replay,
        "pool": pool.name,
        "suite": cfg.suite,
        "n_train": len(train_tasks),
        "n_eval": len(eval_tasks),
        "episodes": state.episodes,
        "after_call_episodes": 0 if after is None else after.episodes,
        "first_again_episodes": 0 if first_run.again is None else first_run.again.episodes,
        "seed": cfg.seed,
        "wall_s": time.perf_counter() - start,
        "results": rows,
        "cost": key,
        "seeds": seeds,
        "headline": headline(rows, grades={name: _grades(r) for name, r in results.items()}),
        "train_curve": [{"episodes": h["episodes"], "return": h["train/return"]} for h in state.history],
    }
    (run / "results.json").write_text(json.dumps(summary, indent=2))
    (run / "report.md").write_text(_report(summary))
    table = Table(title=f"held-out {cfg.suite} (n={len(eval_tasks)}), backend {backend_name}")
    # one cost column (the one the plot and headline use) so that policy names fit 80 columns;
    # report.md has them all
    table.add_column("policy", no_wrap=True)
    for col in ("accuracy", "95% CI", "calls", UNITS[key], "wall s"):
        table.add_column(col)
    for r in rows:
        table.add_row(
            r["policy"],
            f"{r['accuracy']:.2f}",
            f"[{r['ci'][0]:.2f}, {r['ci'][1]:.2f}]",
            f"{r['calls']:.2f}",
            f"{r[key]:.1f}" if key == "model_s" else f"{r[key]:.0f}",
            f"{r['wall_s']:.0f}",
        )
    console.print(table)
    for line in _failed_note(rows):
        console.print(f"[yellow]{escape(line)}[/yellow]")
    if summary["headline"]:
        console.print(summary["headline"])
    console.print(
        f"[bold green]report:[/bold green] {run / 'report.md'}  (took {summary['wall_s'] / 60:.1f} min)"
    )
    return summary


CURVE_NOTE = (
    "Every item of a batch tries every action (first_step=all), so the batch's mean return weighs all "
    "agents alike; the policy's return weighs them as the policy does."
)


@dataclass(frozen=True)
class _SeedRun:
    """One seed's training: the arms to evaluate (name, policy, max steps) and its stages' states."""

    arms: list[tuple[str, Any, int]]
    state: TrainState
    after: TrainState | None
    again: TrainState | None = None  # first_again_episodes: the first decision learned again


def _train_seed(
    cfg: QuickstartConfig,
    job: StepJob,
    env: Any,
    pool: Pool,
    train_tasks: Sequence[Task],
    backend: Any,
    run: Path,
    console: Any,
    backend_name: str,
) -> _SeedRun:
    """The router trained at ``job``'s seed into ``run`` (then the decision after its call, when on)."""
    policy, tcfg = job.policy(), job.trainer
    label = f"train ({backend_name})" if job.seed == cfg.seed else f"train seed {job.seed} ({backend_name})"
    with ProgressReporter(label, cfg.episodes, console=console) as bar:

        def on_episode(ep: Episode) -> None:
            calls = len(ep.trajectory["steps"])
            bar.update(advance=1, info=f"last: {calls} calls, {'correct' if ep.correct else 'wrong'}")

        state = train(
            env, policy, tcfg, run / "train", on_episode=on_episode, save_trajectories=cfg.trajectories
        )
    policy.save(run / "policy")
    policy.config = replace(policy.config, greedy=True)  # evaluate the argmax policy
    if not (cfg.after_call_episodes and cfg.max_steps == 1):
        return _SeedRun([(TRAINED, policy, cfg.max_steps)], state, None)
    # the one-call router becomes the first stage
    second, after, again = _after_call(cfg, job, pool, train_tasks, backend, run, console, backend_name)
    second.config = replace(second.config, greedy=True)
    return _SeedRun([(TRAINED, second, 2), (ONE_CALL, policy, cfg.max_steps)], state, after, again)


def _curves(done: _SeedRun, run: Path, short: str, first_step: str) -> None:
    learning_curve(
        done.state.history,
        run / "learning_curve.png",
        f"Router training: {short}",
        note=CURVE_NOTE if first_step == "all" else None,
    )
    later = (
        (done.after, "learning_curve_after_call.png", "The decision after the router's call"),
        (done.again, "learning_curve_first_again.png", "The first call again, the decision after it fixed"),
    )
    for stage, name, title in later:
        if stage is not None:
            learning_curve(stage.history, run / name, f"{title}: {short}", note=CURVE_NOTE)


def _baseline_specs(cfg: QuickstartConfig) -> list[tuple[str, int]]:
    """(spec, max steps) of each baseline: the fitted rules chosen on the run's training items (the
    same count as the router's), with the rules' own call budget; the other baselines at the run's."""
    fitted = [(f"{r}:{cfg.n_train}" if r in FITTED_RULES else r, cfg.rule_max_steps) for r in cfg.rules]
    return [*fitted, *((b, cfg.max_steps) for b in cfg.baselines)]


def _evaluate(
    cfg: QuickstartConfig,
    spec: Any,
    pool: Pool,
    tasks: Sequence[Task],
    backend: Any,
    max_steps: int,
    out: Path,
    console: Any,
) -> EvalResult:
    """One arm on the held-out items. Every arm, whichever seed trained it, runs on the same held-out
    draws (``cfg.seed``'s): on a simulated pool a call's outcome depends on its sample seed, so each
    (seed, item) pair of the headline compares like with like."""
    console.print(f"evaluating [bold]{out.name}[/bold] on {len(tasks)} held-out items")
    return evaluate_policy(
        spec,
        pool,
        cfg.suite,
        tasks=tasks,
        backend=backend,
        max_steps=max_steps,
        lam=cfg.lam,
        out_dir=out,
        progress=True,
        seed=cfg.seed,
        overwrite=True,  # a quickstart rerun regenerates its own evaluation runs
    )


def _grades(r: EvalResult) -> dict[str, bool]:
    """Each held-out item's grade in an evaluation run (for the paired tests)."""
    if r.out_dir is None:
        return {}
    return {t.task_id: t.correct for t in read_trajectories(Path(r.out_dir) / "trajectories.jsonl")}


def short_pool_name(pool: Pool) -> str:
    """The pool's file name and its number of agents: a subset's name lists every agent it keeps."""
    return f"{pool.name.split('[', 1)[0]} ({len(pool)} agents)"


def _slug(name: str) -> str:
    return "puppeteer-one-call" if name == ONE_CALL else name.split(" ")[0].replace(":", "_")


def _two_step_job(cfg: QuickstartConfig, job: StepJob, pool: Pool, run: Path) -> StepJob:
    """The decision after the router's call: the saved one-call router (``run/policy``) as the fixed
    first decision, every second action tried after its choice (after every first action with
    ``first_again_episodes``: backward induction's first half)."""
    settings = replace(job.settings, max_steps=2, phi=1.0, visible_checks=True)
    firsts = len(pool) if cfg.first_again_episodes else 1
    return replace(
        job,
        settings=settings,
        policy_config=replace(
            job.policy_config,
            max_steps=2,
            signals=True,
            step_heads=True,
            one_call_first=True,
            later_inputs="signals",
        ),
        trainer=replace(
            job.trainer,
            episodes=cfg.after_call_episodes,
            # 8 items an update, every second action after the first (after each first one, with
            # backward induction)
            batch_episodes=8 * firsts * (len(pool) + 1),
            first_step="all",
            second_step="all",
            second_target=cfg.after_call_target,
            later_baseline="stop",
            lr=cfg.after_call_lr,
            parallel_envs=8 * (len(pool) + 1),
            init_first=str(run / "policy"),
            first_tries="all" if cfg.first_again_episodes else "router",
        ),
    )


def _train_stage(
    two: StepJob,
    env: Any,
    policy: PuppeteerPolicy,
    label: str,
    run: Path,
    save: str,
    cfg: QuickstartConfig,
    console: Any,
) -> TrainState:
    with ProgressReporter(label, two.trainer.episodes, console=console) as bar:

        def on_episode(ep: Episode) -> None:
            bar.update(advance=1, info=f"last: {len(ep.trajectory['steps'])} calls")

        state = train(
            env,
            policy,
            two.trainer,
            run / f"train-{save}",
            on_episode=on_episode,
            save_trajectories=cfg.trajectories,
        )
    policy.save(run / f"policy-{save}")
    return state


def _after_call(
    cfg: QuickstartConfig,
    job: StepJob,
    pool: Pool,
    tasks: Sequence[Task],
    backend: Any,
    run: Path,
    console: Any,
    backend_name: str,
) -> tuple[PuppeteerPolicy, TrainState, TrainState | None]:
    """The later stages: the decision after the router's call (:func:`_two_step_job`) trained on the
    same items and backend; with ``first_again_episodes``, then the first decision again, from the
    router, on what each first call is worth when the decision after it (now fixed) acts (backward
    induction's second half). Returns the two-step policy and each stage's state."""
    two = _two_step_job(cfg, job, pool, run)
    env = build_env(two.settings, pool=pool, suite=cfg.suite, tasks=tasks, backend=backend)
    policy = two.policy()
    label = f"train the decision after a call ({backend_name})"
    state = _train_stage(two, env, policy, label, run, "after-call", cfg, console)
    if not cfg.first_again_episodes:
        return policy, state, None
    again = replace(
        two,
        trainer=replace(
            two.trainer,
            episodes=cfg.first_again_episodes,
            init_first=None,
            first_tries="router",
            init_policy=str(run / "policy-after-call"),
            freeze_later=True,
            lr=job.trainer.lr,  # the router's own
            first_weights="uniform",
        ),
    )
    policy = again.policy()
    label = f"train the first call again, the decision after it fixed ({backend_name})"
    return policy, state, _train_stage(again, env, policy, label, run, "first-again", cfg, console)


def _model_s(row: Mapping[str, Any]) -> str:
    return "-" if row.get("model_s") is None else f"{row['model_s']:.1f}"


def _point(row: Mapping[str, Any], key: str) -> CostPoint:
    return CostPoint(row["policy"], float(row[key]), row["accuracy"], row["ci"][0], row["ci"][1])


def seed_note(seed: int, n_seeds: int = 1) -> str:
    """Which seeds the report shows, and how they were chosen."""
    how = (
        "the default, fixed before any run, not picked among seeds after seeing their results"
        if seed == QuickstartConfig.seed
        else "given with `--seed`"
    )
    if n_seeds > 1:
        return (
            f"Seeds {seed} to {seed + n_seeds - 1} (`--seeds {n_seeds}`; the first {how}), every one "
            "reported: each sets its router's training draws and initial weights, not the items. Every "
            f"policy is evaluated on the same held-out draws (seed {seed}), so the headline's (seed, item) "
            "pairs compare like with like; it gives the mean and the worst seed."
        )
    return (
        f"Seed {seed}: {how}. The seed sets the training's draws, the router's initial weights and the "
        "held-out episodes' sample seeds, not the items; other seeds train other routers "
        "(`puppeteer quickstart --seed N`; experiments/local-mix/README.md section 5 reports three seeds "
        "of the "
        "one-call router)."
    )


def _curves_dir(s: Mapping[str, Any]) -> str:
    """Where the report's learning curves are: the run itself, or the first seed's folder of several."""
    seeds = s.get("seeds", [])
    return f"seed{seeds[0]}/" if len(seeds) > 1 else ""


def _failed_note(rows: Sequence[Mapping[str, Any]]) -> list[str]:
    """A line naming the policies with items that failed with an error (counted as wrong), or none."""
    failed = [f"{r['policy']} {r['errors']}" for r in rows if r.get("errors")]
    if not failed:
        return []
    return [
        "",
        "Items that failed with an error, counted as wrong (the messages are in each policy's "
        f"eval/*/trajectories.jsonl): {', '.join(failed)}.",
    ]


def _report(s: dict[str, Any]) -> str:
    lines = [
        "# puppeteer quickstart report",
        "",
        f"Backend **{s['backend']}**, pool `{s['pool']}`, suite `{s['suite']}`: "
        f"{s['n_train']} training items, {s['n_eval']} held-out items, {s['episodes']} REINFORCE episodes, "
        + (
            f"then {s['after_call_episodes']} for the decision after the router's call (its first decision "
            "kept fixed, experiments/local-mix/README.md section 7), "
            if s.get("after_call_episodes") and not s.get("first_again_episodes")
            else ""
        )
        + (
            f"then {s['after_call_episodes']} for the decision after every first call (the router fixed) and "
            f"{s['first_again_episodes']} for the first call again, that decision fixed (backward "
            "induction, experiments/steps-learner), "
            if s.get("first_again_episodes")
            else ""
        )
        + f"{s['wall_s'] / 60:.1f} min in all.",
        "",
        seed_note(s.get("seed", 0), len(s.get("seeds", [0]))),
        "",
        *([f"{s['replay']}", ""] if s.get("replay") else [""]),
        "| policy | accuracy | 95% CI | calls | tokens | model s | wall s | cache hits / misses |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in s["results"]:
        lines.append(
            f"| {r['policy'].replace('|', '/')} | {r['accuracy']:.2f} | [{r['ci'][0]:.2f}, {r['ci'][1]:.2f}] "
            f"| {r['calls']:.2f} | {r['tokens']:.0f} | {_model_s(r)} | {r['wall_s']:.0f} | "
            f"{r['cache_hits']} / {r['cache_misses']} |"
        )
    lines += _failed_note(s["results"])
    lines += [
        "",
        "Per item: calls, tokens (prompt + completion), model s (single-stream model seconds at the pool's "
        "declared speeds: what the calls cost alone on the reference machine, whatever the batching or "
        "load), wall s (this run's evaluation time, after cache replays).",
        "",
        *([s["headline"], ""] if s.get("headline") else []),
        "![accuracy vs cost](pareto.png)",
        "",
        f"![learning curve]({_curves_dir(s)}learning_curve.png)",
        "",
        *(
            [f"![learning curve after the call]({_curves_dir(s)}learning_curve_after_call.png)", ""]
            if s.get("after_call_episodes")
            else []
        ),
        *(
            [f"![learning curve, the first call again]({_curves_dir(s)}learning_curve_first_again.png)", ""]
            if s.get("first_again_episodes")
            else []
        ),
        "![agent usage](agent_usage.png)",
        "",
        "Intervals are 95% Wilson intervals of each policy alone; the headline's tests pair the trained "
        "router with each reference item by item (with several seeds, every (seed, item) pair). "
        "`best-rule` and `best-single` are chosen on the training items at the run's lambda and cost "
        "model, with no learning (docs/policies.md). With few held-out items (`--n-eval`) read the table "
        "as a smoke test of real-model orchestration, not as a benchmark.",
        "",
    ]
    return "\n".join(lines)
