"""The REINFORCE trainer's settings (``trainer.*`` of a run's configuration), checked when made."""

from __future__ import annotations

from dataclasses import dataclass

from puppeteer.train.reinforce.baselines import BASELINES
from puppeteer.utils.checks import integer, number


@dataclass(frozen=True)
class ReinforceConfig:
    episodes: int = 2000
    batch_episodes: int = 64
    group_size: int = 4
    lr: float = 3e-3  # 1e-2 made Adam collapse every router onto one agent within a few updates
    weight_decay: float = 1e-4
    baseline: str = "group"  # none | ema | group | prefix
    # "sample": each group's episodes draw their first action from the policy; "all": a group tries
    # every available agent first on its task and the first decision's gradient is the exact
    # expectation over them (all-action policy gradient; later steps stay REINFORCE), which does not
    # commit to whichever agent was lucky early when agents differ by a few points
    first_step: str = "sample"
    # first_step=all, the baseline of each later decision (step t >= 1): "first", the value of the first
    # decision (V = sum_a pi(a) G_a, so a second call's advantage carries the first call's luck), or
    # "stop", what stopping at t would return (the answer so far graded, nothing more paid; a function
    # of the state, not the action): a call is credited with what it adds over stopping
    later_baseline: str = "first"
    # first_step=all and two-step episodes (max_steps=2): "all" also tries every second action (the
    # Terminator included) after every first one, so both decisions' gradients are exact expectations
    # over the group's item (|A| x (|A| + 1) episodes a group; cheap where calls replay from a table)
    second_step: str = "sample"
    # first_step=all, how the first decision's exact loss weighs each first action: "policy" (pi(a), the
    # gradient of the expected return) or "uniform" (1/|A|: a collapsed policy still learns that an
    # agent it has turned from is better; experiments/local-mix/README.md, section 6)
    first_weights: str = "policy"
    # second_step=all, what the decision after a call is fitted to: None, the exact policy gradient; a
    # temperature t, softmax(Q / t) over the returns of every second action tried on the item
    # (cross-entropy: an action the policy has turned from that pays on a few states is pulled back,
    # where the policy gradient's pull is weighed by its vanishing probability;
    # experiments/local-mix/README.md, section 7)
    second_target: float | None = None
    # a saved one-call router (a run's best/ or final/) that makes the first decision, its weights kept
    # fixed, while the decisions after a call are learned (needs policy.step_heads,
    # policy.one_call_first, first_step=all and second_step=all): each group tries the router's greedy
    # first action and every second action after it, so a router that already routes by kind learns
    # only when to call again
    init_first: str | None = None
    # init_first: the first actions a group tries. "router": only the router's greedy choice (the decision
    # after the router's call is learned); "all": every first action, the router still fixed, each state
    # after a first action weighed alike (the decision after *any* call is learned: the first half of
    # backward induction, which a later run with freeze_later completes)
    first_tries: str = "router"
    # a saved policy of the same settings and agents (a run's final/ or best/) whose weights the run
    # starts from (the statistics it read its training tasks by included)
    init_policy: str | None = None
    # keep the decisions after the first call fixed (policy.step_heads): with first_step=all and
    # second_step=all the first decision is then learned on what each first call is worth when the
    # fixed later decisions act after it (the second half of backward induction)
    freeze_later: bool = False
    # a lambda-conditioned run (lam_range) of one-call episodes (max_steps=1) with first_step=all: each
    # group's first decision is also learned at this many more lambdas drawn from the range, the same
    # calls' returns re-priced (exact for one call: R(x) = R(lam) + (lam - x) C); 0: only its own lambda
    lam_relabel: int = 0
    ema_decay: float = 0.9
    entropy_coef: float = 0.01
    # the entropy bonus decays linearly to this fraction of entropy_coef over the run (1: constant): a
    # high early bonus keeps every agent tried until the slow ones to learn (specialists) have a say,
    # a low late one lets the policy commit
    entropy_final_fraction: float = 1.0
    max_grad_norm: float = 1.0
    lr_final_fraction: float = 0.1  # learning rate decays linearly to this fraction of lr
    checkpoint_every: int = 5
    eval_every: int = 10
    parallel_envs: int = 32  # episodes run in lockstep so observations are encoded in batches
    seed: int = 0
    rollout_workers: int = 0  # >0: the lockstep envs live on this many Ray workers (same results)
    ray_address: str | None = None  # None: a local Ray instance; "auto" or "ray://host:10001": a cluster
    # stop cleanly (checkpoint saved) once more than this fraction of the run's episodes ended on
    # a failed backend call; each such episode is recorded and graded as wrong
    max_failed_fraction: float = 0.25

    def __post_init__(self) -> None:
        integer("trainer.episodes", self.episodes, low=1)
        integer("trainer.batch_episodes", self.batch_episodes, low=1)
        integer("trainer.group_size", self.group_size, low=1)
        integer("trainer.checkpoint_every", self.checkpoint_every, low=1)
        integer("trainer.eval_every", self.eval_every, low=1)
        integer("trainer.parallel_envs", self.parallel_envs, low=1)
        number("trainer.lr", self.lr, low=0.0, low_open=True)
        number("trainer.weight_decay", self.weight_decay, low=0.0)
        number("trainer.ema_decay", self.ema_decay, low=0.0, high=1.0)
        number("trainer.entropy_coef", self.entropy_coef)
        number("trainer.entropy_final_fraction", self.entropy_final_fraction, low=0.0)
        number("trainer.max_grad_norm", self.max_grad_norm, low=0.0, low_open=True)
        number("trainer.lr_final_fraction", self.lr_final_fraction, low=0.0, high=1.0)
        integer("trainer.rollout_workers", self.rollout_workers, low=0)
        integer("trainer.lam_relabel", self.lam_relabel, low=0)
        number("trainer.max_failed_fraction", self.max_failed_fraction, low=0.0, high=1.0)
        if self.first_step not in FIRST_STEPS:
            raise ValueError(
                f"trainer.first_step: unknown {self.first_step!r}; known: {', '.join(FIRST_STEPS)}"
            )
        if self.first_tries not in FIRST_TRIES:
            raise ValueError(
                f"trainer.first_tries: unknown {self.first_tries!r}; known: {', '.join(FIRST_TRIES)}"
            )
        if self.first_tries != "router" and self.init_first is None:
            raise ValueError(
                "trainer.first_tries chooses what a group tries after init_first's router: set that too"
            )
        if self.freeze_later and self.init_first is not None:
            raise ValueError("trainer.freeze_later with trainer.init_first would train nothing: choose one")
        if self.baseline not in BASELINES:
            raise ValueError(f"trainer.baseline: unknown {self.baseline!r}; known: {', '.join(BASELINES)}")
        if self.batch_episodes % self.group_size:
            raise ValueError(
                f"trainer.batch_episodes={self.batch_episodes} must be a multiple of "
                f"trainer.group_size={self.group_size}"
            )


FIRST_STEPS = ("sample", "all")
FIRST_TRIES = ("router", "all")  # trainer.init_first: the first actions a group tries


LATER_BASELINES = ("first", "stop")  # first_step=all: the later decisions' baseline (ReinforceConfig)
