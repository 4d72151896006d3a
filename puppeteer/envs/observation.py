"""The observation of ``Conductor-v0``: the question, the transcript so far, who has acted, the answer
signals and the episode's lambda (step mode), or the conductor prompt (workflow mode)."""

from __future__ import annotations

from typing import Any

import numpy as np

from puppeteer.tasks.signals import AnswerTally

MAX_OBS_CHARS = 200_000
RESPONSE_CHARS_IN_STATE = 1_500


class Observation:
    """Builds :class:`~puppeteer.envs.env.ConductorEnv`'s observations from the episode's state it holds."""

    def _state_text(self) -> str:
        parts = self._state_parts  # one line per step, kept across the steps of an episode
        if len(parts) > len(self._steps):
            parts.clear()
        for s in self._steps[len(parts) :]:
            text = s.completion.text
            if len(text) > RESPONSE_CHARS_IN_STATE:
                text = "..." + text[-RESPONSE_CHARS_IN_STATE:]
            parts.append(f"[{s.index + 1}] {s.agent_name} ({self._patterns[s.agent_id]}): {text}")
        return "\n".join(parts)[-MAX_OBS_CHARS:]

    def _counts(self) -> np.ndarray:
        """Calls per agent so far (counted once per step, kept across the steps of an episode)."""
        steps, counts = self._steps, self._agent_counts
        if self._counted > len(steps):  # the steps were replaced: count again
            counts = self._agent_counts = np.zeros(self._n_actions, dtype=np.int64)
            self._counted = 0
        for s in steps[self._counted :]:
            counts[s.agent_id] += 1
        self._counted = len(steps)
        return counts.copy()

    def _signals(self) -> np.ndarray:
        """``answer_signals`` of the steps' answers (each answer tallied once per episode)."""
        steps, tally = self._steps, self._tally
        if tally.n > len(steps):  # the steps were replaced: tally again
            tally = self._tally = AnswerTally(self._signal_vectors)
        checks = self.parts.checks if self.config.visible_checks else None
        for i in range(tally.n, len(steps)):
            answer = steps[i].answer
            tally.add(answer, checks.check(self.task, answer) if checks is not None else None)
        return tally.signals()

    def _obs(self) -> dict[str, Any]:
        task = self.task  # raises before the first reset
        if self.config.mode == "step":
            return {
                "task": task.question[:MAX_OBS_CHARS],
                "state": self._state_text(),
                "mask": self._current_mask(),
                "step": len(self._steps),
                "counts": self._counts(),
                "signals": self._signals(),
                "lam": self._lam_array.copy(),
            }
        return {
            "task": task.question[:MAX_OBS_CHARS],
            "prompt": self.prompt().text[:MAX_OBS_CHARS],
            "mask": self._current_mask(),
            "depth": self._depth,
            "lam": self._lam_array.copy(),
        }
