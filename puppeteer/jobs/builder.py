"""The one builder of a step-mode job: its environments, the puppeteer policy and the trainer settings.

A :class:`StepJob` holds what every job decides (env settings, pool, policy and trainer configs,
seed, how backends are built); :meth:`StepJob.env` builds an environment on any split or task
list, :meth:`StepJob.policy` the policy, and :func:`heldout` scores a policy greedily on every
item of an env, ``n_envs`` episodes in lockstep.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from puppeteer.agents.pool import Pool, load_pool
from puppeteer.envs.build import BackendSpec, EnvConfig, build_env
from puppeteer.envs.env import ConductorEnv
from puppeteer.policies.puppeteer import PuppeteerPolicy
from puppeteer.policies.puppeteer_config import PolicyConfig
from puppeteer.train.reinforce import ReinforceConfig, evaluate
from puppeteer.types import Task


@dataclass(frozen=True)
class StepJob:
    """What a step-mode REINFORCE job is built from."""

    settings: EnvConfig
    pool: Pool
    policy_config: PolicyConfig
    trainer: ReinforceConfig
    suite: str = ""
    seed: int = 0
    backend: BackendSpec = field(default_factory=BackendSpec)

    @classmethod
    def on_simulator(
        cls,
        pool: str,
        suite: str,
        *,
        lam: float,
        max_steps: int,
        encoder: str,
        trainer: ReinforceConfig,
        policy_min_steps: int = 0,
        seed: int = 0,
        lam_range: tuple[float, float] | None = None,
    ) -> StepJob:
        """The studies' job: a step env with these settings (the rest default), a pool by name;
        ``lam_range``: one policy for every lambda in the range (drawn per episode while training)."""
        return cls(
            settings=EnvConfig(mode="step", lam=lam, max_steps=max_steps, lam_range=lam_range),
            pool=load_pool(pool),
            policy_config=PolicyConfig(
                encoder=encoder, max_steps=max_steps, min_steps=policy_min_steps, lam_range=lam_range
            ),
            trainer=trainer,
            suite=suite,
            seed=seed,
        )

    def env(
        self,
        split: str = "train",
        n: int | None = None,
        *,
        tasks: Sequence[Task] | None = None,
        training: bool = False,
    ) -> ConductorEnv:
        """An env on ``tasks`` or the first ``n`` items of ``suite``/``split``, with backends of its own.

        Random k-of-n agent subsets (``settings.k_available``) and lambdas drawn per episode
        (``settings.lam_range``) apply to the training env only.
        """
        settings = (
            self.settings
            if training
            else replace(self.settings, k_available=None, holdout_subsets=(), lam_range=None)
        )
        return build_env(
            settings,
            pool=self.pool,
            suite=self.suite,
            split=split,
            n_tasks=n,
            tasks=tasks,
            backend_options=self.backend.options,
            cache=self.backend.cache,
        )

    def seeded(self, seed: int) -> StepJob:
        """The same job with another seed (the policy's initialisation and the trainer's)."""
        return replace(self, seed=seed, trainer=replace(self.trainer, seed=seed))

    def policy(self, encoder: Any = None) -> PuppeteerPolicy:
        """A fresh puppeteer policy (``encoder``: an already loaded encoder to share across runs)."""
        return PuppeteerPolicy(self.pool, self.policy_config, encoder=encoder, seed=self.seed)


def env_copies(env: ConductorEnv, n: int) -> list[ConductorEnv]:
    """``env`` and ``n - 1`` clones (same backend): the envs of one lockstep rollout."""
    return [env, *(env.clone() for _ in range(n - 1))]


def heldout(
    env: ConductorEnv, policy: PuppeteerPolicy, n_envs: int, lam: float | None = None
) -> dict[str, float]:
    """The greedy policy on every item of ``env`` once, ``n_envs`` at a time (the reported numbers);
    ``lam``: every episode priced at this lambda instead of the env's own."""
    return evaluate(env_copies(env, n_envs), policy, lam=lam)


__all__ = ["StepJob", "env_copies", "heldout"]
