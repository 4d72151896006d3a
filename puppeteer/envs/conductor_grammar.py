"""A GBNF grammar under which every conductor completion is a valid workflow (llama.cpp's format).

The grammar accepts a little free reasoning first (text without ``[``, so a list can only start
the plan), then exactly the three lists :func:`puppeteer.envs.workflow.parse_workflow` reads::

    # thoughts, on a few lines
    model_id = [2, 0]
    subtasks = ['Solve the problem step by step.', 'Check the answer above.']
    access_list = [[], 'all']

By construction: the three lists have one entry per step and at most ``max_steps`` steps; ids are
only those of available agents (the conductor's own id, when it may recurse, only as the last
step); access entries are ``[]``, ``'all'`` or earlier step indices; subtasks are non-empty one-line
strings. After the last list the grammar is complete, so generation ends there. With ``final=True``
(the env's ``aggregate="plan"``) a plan may end with one more line, ``final = k`` (a step index),
``final = 'vote'`` or ``final = 'last'``; with ``cascade=True`` also, in plans of two steps or more,
``final = 'cascade:TRIGGER'``.

And the plan always fits: every free-text character is printable ASCII, so each token of a
completion adds at least one character, and the longest text the grammar allows (its skeleton, the
subtasks and the reasoning) is at most ``max_tokens`` characters. A constrained completion is
therefore never cut at ``max_tokens``: every plan parses.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from puppeteer.envs.workflow import CASCADE_WORDS

SUBTASK_CHARS = 160  # the longest subtask a roomy budget allows (one instruction, not an essay)
REASONING_SHARE = 0.4  # of the characters left after the plan's skeleton, the reasoning's share
REASONING_LINES = 4
MIN_SUBTASK_CHARS = 8

# printable ASCII without what ends the context: ' or \ in '...', " or \ in "...", [ in reasoning
_CHARS = r"""
sq1 ::= [\x21-\x26\x28-\x5B\x5D-\x7E]
sq ::= [\x20-\x26\x28-\x5B\x5D-\x7E]
dq1 ::= [\x21\x23-\x5B\x5D-\x7E]
dq ::= [\x20\x21\x23-\x5B\x5D-\x7E]
rc ::= [\x20-\x5A\x5C-\x7E]
all ::= "'all'" | "\"all\""
"""


@dataclass(frozen=True)
class PlanGrammar:
    """A grammar and the bounds it was sized with (for the record and for tests)."""

    text: str
    max_steps: int
    subtask_chars: int
    reasoning_chars: int
    longest: int  # characters of the longest completion the grammar accepts


def _alternatives(values: Sequence[int]) -> str:
    return " | ".join(f'"{v}"' for v in values)


FINAL_LINE_CHARS = len("\nfinal = 'vote'")  # the longest final line (a step index is shorter)
FINAL_WORDS = ("'vote'", "'last'")  # what a final line may name besides a step index
CASCADE_FINALS = tuple(f"'{w}'" for w in CASCADE_WORDS)  # and, where cascades are offered, these
CASCADE_LINE_CHARS = len("\nfinal = ") + max(len(w) for w in CASCADE_FINALS)


def _literal_alternatives(values: Sequence[str]) -> list[str]:
    """GBNF string literals of ``values`` (no double quotes or backslashes in them)."""
    return [f'"{v}"' for v in values]


def _skeleton_chars(
    ids: Sequence[int], last_ids: Sequence[int], n: int, final: bool = False, cascade: bool = False
) -> int:
    """Characters of the longest ``n``-step plan apart from its subtasks' contents."""
    width = max(len(str(i)) for i in ids)
    last = max(len(str(i)) for i in last_ids)
    model_id = len("model_id = []") + width * (n - 1) + last + 2 * (n - 1)
    subtasks = len("\nsubtasks = []") + 2 * n + 2 * (n - 1)  # quotes and separators
    access = len("\naccess_list = []") + 2 * (n - 1)
    for j in range(n):  # the longest entry of step j: 'all', or j earlier indices
        listed = 2 + j * len(str(j - 1)) + 2 * (j - 1) if j else 2  # repeats allowed
        access += max(len("'all'"), listed)
    line = (CASCADE_LINE_CHARS if cascade else FINAL_LINE_CHARS) if final else 0
    return model_id + subtasks + access + line


def plan_grammar(
    available: Sequence[int],
    max_steps: int,
    max_tokens: int,
    *,
    self_id: int | None = None,
    allow_empty: bool = False,
    reasoning: bool = True,
    final: bool = False,
    cascade: bool = False,
) -> PlanGrammar:
    """The GBNF grammar of one planning round, sized to fit in ``max_tokens`` tokens.

    ``available``: the agent ids the plan may use; ``self_id``: the conductor's own id, allowed only
    as the last step (recursion); ``allow_empty``: the three empty lists are a valid answer (an inner
    planning round keeping the last answer); ``reasoning``: a few lines of free text before the lists;
    ``final``: an optional last line naming the final answer (a step index, 'vote' or 'last'; with
    ``self_id``, not the last step, which may be the conductor's own); ``cascade`` (with ``final``): that
    line may also name a cascade, in plans of two steps or more that do not end on the conductor.
    Raises ValueError when ``max_tokens`` cannot hold a ``max_steps``-step plan with subtasks of at
    least :data:`MIN_SUBTASK_CHARS` characters.
    """
    ids = sorted({int(i) for i in available})
    if not ids:
        raise ValueError("a plan needs at least one available agent")
    if max_steps < 1:
        raise ValueError(f"max_steps must be >= 1, got {max_steps}")
    last_ids = [*ids, int(self_id)] if self_id is not None else ids
    budget = max_tokens - 1  # one token for the end of generation
    if cascade and not final:
        raise ValueError("cascade is a final line's choice: it needs final=True")
    room = budget - _skeleton_chars(ids, last_ids, max_steps, final, cascade)
    share = 1.0 - REASONING_SHARE if reasoning else 1.0
    subtask = min(SUBTASK_CHARS, int(room * share) // max_steps)
    if subtask < MIN_SUBTASK_CHARS:
        raise ValueError(
            f"max_tokens={max_tokens} cannot hold a {max_steps}-step plan with subtasks of "
            f"{MIN_SUBTASK_CHARS}+ characters; raise max_tokens or lower max_steps"
        )
    think = room - subtask * max_steps if reasoning else 0
    lines = max(1, min(REASONING_LINES, think // 40))
    per_line = max(0, think // lines - 1)  # each line ends with a newline
    thinks = reasoning and per_line > 0
    rules = [
        "root ::= think plan" if thinks else "root ::= plan",
        *([f"think ::= (rc{{0,{per_line}}} [\\n]){{0,{lines}}}"] if thinks else []),
        f"id ::= {_alternatives(ids)}",
        f"last ::= {_alternatives(last_ids)}",
        f'str ::= "\'" sq1 sq{{0,{subtask - 1}}} "\'" | "\\"" dq1 dq{{0,{subtask - 1}}} "\\""',
    ]
    plans = [f"plan{n}" for n in range(1, max_steps + 1)]
    if allow_empty:
        rules.append('plan0 ::= "model_id = []\\nsubtasks = []\\naccess_list = []"')
        plans.insert(0, "plan0")
    rules.append("plan ::= " + " | ".join(plans))
    for j in range(max_steps):  # step j sees none, all, or up to j of the steps 0..j-1
        more = f' (", " e{j}){{0,{j - 1}}}' if j > 1 else ""
        earlier = f' | "[" e{j}{more} "]"' if j else ""
        rules.append(f'acc{j} ::= "[]" | all{earlier}')
        if j:
            rules.append(f"e{j} ::= {_alternatives(range(j))}")
    for n in range(1, max_steps + 1):
        model_ids = " ".join(['id ", "'] * (n - 1) + ["last"])
        subtasks = ' ", " '.join(["str"] * n)
        access = ' ", " '.join(f"acc{j}" for j in range(n))
        tail = f" fin{n}?" if final else ""
        if final:
            named = [str(k) for k in range(n - 1 if self_id is not None else n)]
            cascades = CASCADE_FINALS if cascade and n > 1 and self_id is None else ()
            choices = " | ".join(_literal_alternatives([*named, *FINAL_WORDS, *cascades]))
            rules.append(f'fin{n} ::= "\\nfinal = " ({choices})')
        rules.append(
            f'plan{n} ::= "model_id = [" {model_ids} "]\\nsubtasks = [" {subtasks} '
            f'"]\\naccess_list = [" {access} "]"{tail}'
        )
    text = "\n".join(rules) + "\n" + _CHARS.strip() + "\n"
    longest = _skeleton_chars(ids, last_ids, max_steps, final, cascade) + subtask * max_steps
    longest += lines * (per_line + 1) if thinks else 0
    return PlanGrammar(text, max_steps, subtask, lines * per_line if thinks else 0, longest)


__all__ = ["MIN_SUBTASK_CHARS", "SUBTASK_CHARS", "PlanGrammar", "plan_grammar"]
