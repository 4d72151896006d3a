"""A shipped outcome table (:mod:`puppeteer.backends.replay`, built by ``puppeteer outcomes build``) in the
long form that ``puppeteer outcomes import`` reads: one row per item and agent, the question as the prompt,
the item's domain as its task, the grade as the score, the logged tokens and a cost in USD from the
agents' list prices (0 for local models)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import pandas as pd

from puppeteer.agents.pool import Pool
from puppeteer.backends.replay import Outcome


def long_from_outcomes(outcomes: Sequence[Outcome], questions: Mapping[str, str], pool: Pool) -> pd.DataFrame:
    """The rows of ``outcomes`` whose item is in ``questions`` (task id -> question text), long form."""
    prices = {a.name: a.model for a in pool.agents}
    rows = []
    for o in outcomes:
        if o.task_id not in questions or o.agent not in prices:
            continue
        model = prices[o.agent]
        rows.append(
            {
                "prompt_id": o.task_id,
                "prompt": questions[o.task_id],
                "task": o.domain,
                "split": o.split,
                "model": o.agent,
                "score": 1.0 if o.correct else 0.0,
                "cost_usd": (o.prompt_tokens * model.price_in + o.completion_tokens * model.price_out) / 1e6,
                "prompt_tokens": o.prompt_tokens,
                "completion_tokens": o.completion_tokens,
            }
        )
    return pd.DataFrame(rows)
