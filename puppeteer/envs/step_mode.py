"""``mode="step"`` of ``Conductor-v0``: an action calls one agent or ends the episode with the Terminator."""

from __future__ import annotations

from typing import Any

import numpy as np
from gymnasium.error import InvalidAction

from puppeteer.envs.reward import discounted_return, discounted_returns


class StepMode:
    """The step-mode actions of :class:`~puppeteer.envs.env.ConductorEnv`, which holds the episode's state."""

    def _step_agent(self, action: Any):
        if type(action) is not int:  # a plain int is the common case
            action = self._agent_id(action)
        a = action
        if not 0 <= a < self._n_actions:
            raise InvalidAction(
                f"action {a} out of range 0..{self.pool.terminator_id} (the last is the Terminator)"
            )
        if not self._allowed(a):
            if self.config.invalid_action == "remap":  # the next valid action after it
                mask = self._current_mask()
                a = next(b for k in range(1, len(mask)) if mask[b := (a + k) % len(mask)])
            elif a == self._terminator:
                raise InvalidAction(f"the Terminator is masked until {self.config.min_steps} agent(s) acted")
            else:
                raise InvalidAction(f"agent {a} ({self.pool.agent(a).name}) is not available")
        t = len(self._steps)
        if a == self._terminator:
            return self._end_episode(f=0.0, t=t, terminated_by="terminator")
        visible = self._steps if self._sees_work[a] else []
        # the question as a workflow step gets it (``Workflow`` strips subtasks), so one agent on one item
        # sends the same request in both modes and a table built from one replays the other
        step = self.executor.run_step(self._context(), t, a, self._task.question.strip(), visible)
        self._steps.append(step)
        if self._recorded is not None:  # the next step offers what the table holds after this one
            self._mask = self._recorded_mask()
        f = self._step_cost(step)
        if len(self._steps) >= self.config.max_steps:
            return self._end_episode(f=f, t=t + 1, terminated_by="max_steps")
        reward = self._reward.step_reward(f, t + 1)
        self._rewards.append(reward)
        return self._obs(), reward, False, False, self._info(step=step, cost=f, **self._graded_so_far())

    @staticmethod
    def _agent_id(action: Any) -> int:
        """A step-mode action as an int: what Discrete.contains accepts (int, numpy integers and 0-d
        integer arrays, model.predict's output)."""
        if isinstance(action, np.ndarray) and action.shape == () and np.issubdtype(action.dtype, np.integer):
            action = action.item()
        if isinstance(action, bool) or not isinstance(action, int | np.integer):
            shape = f" of shape {action.shape}" if isinstance(action, np.ndarray) else ""
            raise InvalidAction(f"step-mode actions are agent ids (int), got {type(action).__name__}{shape}")
        return int(action)

    def _graded_so_far(self) -> dict[str, Any]:
        """The episode graded as if it ended now, so a wrapper's truncation (``TimeLimit``) is graded too.

        The same keys as at the end (``trajectory``, ``correct``, ``final_answer``); the
        trajectory's reward is the discounted return of the rewards paid so far.
        """
        answer = self._aggregate([s.answer for s in self._steps])
        if answer not in self._grades:  # the majority answer rarely changes from step to step
            self._grades[answer] = self._grade(answer)
        correct = self._grades[answer]
        ret = discounted_return(self._rewards, self.config.gamma)
        return {
            "trajectory": self._trajectory(answer, correct, ret),
            "correct": correct,
            "final_answer": answer,
            # what the Terminator would be paid now (no cost: it calls nobody), the return from here if
            # the episode stopped: a baseline for the next decision (trainer.later_baseline=stop)
            "stop_return": self._reward.final_reward(correct, 0.0, max(len(self._steps), 1)),
        }

    def _end_episode(self, f: float, t: int, terminated_by: str):
        answer = self._aggregate([s.answer for s in self._steps])
        correct = self._grades[answer] if answer in self._grades else self._grade(answer)
        reward = self._reward.final_reward(correct, f, max(t, 1))
        returns = discounted_returns([*self._rewards, reward], self.config.gamma)
        traj = self._trajectory(answer, correct, returns[0] if returns else reward)
        return self._finish(
            reward,
            trajectory=traj,
            correct=correct,
            final_answer=answer,
            terminated_by=terminated_by,
            returns=returns,
            cost=f,
        )
