"""The ``logged`` backend: an imported outcome table answers for the models it logged, with no model call.

An imported suite's items have the gold answer ``1`` (``loader: logged``). Asked for item
``<suite>/<prompt_id>`` by model target ``T``, this backend looks up the logged score ``s`` of ``T`` on
that prompt and answers ``\\boxed{1}`` (right) or ``\\boxed{0}`` (wrong), with the logged tokens and
cost in USD. A score of 1 is always right and 0 always wrong; a fractional score (partial credit)
is right for a fixed share ``s`` of draws: a hash of (seed, prompt, model) below ``s``, so the same
call always gets the same answer and the mean reward over prompts follows the logged scores. The
router benchmark (:mod:`puppeteer.analytics.field_routers`) reads the scores themselves.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from puppeteer.backends.base import SyncBackend, refuse_grammar
from puppeteer.errors import UserError
from puppeteer.outcomes.store import load_logged
from puppeteer.types import Completion, CompletionRequest

RIGHT, WRONG = "\\boxed{1}", "\\boxed{0}"


class LoggedMiss(UserError, LookupError):
    """The table has no outcome for a requested (prompt, model)."""


def draw(seed: int, prompt_id: str, model: str) -> float:
    """A uniform number in [0, 1) fixed by (seed, prompt, model)."""
    digest = hashlib.sha256(f"{seed}\x1f{prompt_id}\x1f{model}".encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64


def is_right(score: float, u: float) -> bool:
    """Whether a call with logged ``score`` and draw ``u`` answers right (always for 1, never for 0)."""
    return score >= 1.0 or (score > 0.0 and u < score)


class LoggedBackend(SyncBackend):
    name = "logged"

    def __init__(self, table: str | Path, seed: int = 0) -> None:
        self.table = load_logged(table)
        self.seed = int(seed)
        self._rows = {p: i for i, p in enumerate(self.table.prompt_ids)}
        self._cols = {m: j for j, m in enumerate(self.table.models)}

    def complete(self, request: CompletionRequest) -> Completion:
        refuse_grammar(request, self.name)
        _, _, prompt_id = request.context.item_key.partition("/")
        target = request.model.target
        i, j = self._rows.get(prompt_id), self._cols.get(target)
        if i is None or j is None:
            what = f"prompt {prompt_id!r}" if i is None else f"model {target!r}"
            raise LoggedMiss(
                f"the imported table has no outcome for {what} (item {request.context.item_key!r})"
            )
        right = is_right(float(self.table.score[i, j]), draw(self.seed, prompt_id, target))
        return Completion(
            text=RIGHT if right else WRONG,
            prompt_tokens=int(self.table.prompt_tokens[i, j]),
            completion_tokens=int(self.table.completion_tokens[i, j]),
            cost_usd=float(self.table.cost[i, j]),
            flops=0.0,
            latency_s=0.0,
            model=target,
            cached=True,
        )
