"""The conductor's action: parse and validate the three lists ``model_id``, ``subtasks``, ``access_list``.

Parsing is literal only (``ast.literal_eval`` on a bracket-matched span, never
``eval``), bounded in size, and the last well-formed triple in a completion wins,
so a conductor may reason, draft, and then state its final workflow.

Where the env lets the plan choose its final answer (``aggregate="plan"``), the triple may come with
a line ``final = k`` (step k's answer is final, 0-based; ``-1`` is the last step), ``final = 'vote'``
(majority vote over the steps' answers) or ``final = 'last'``, anywhere between its ``model_id`` and
the next one. Where it also offers cascades (``aggregate="cascade"``), ``final = 'cascade:TRIGGER'``
makes each step after the first conditional: it runs only when ``TRIGGER``
(:data:`puppeteer.tasks.signals.TRIGGERS`: ``silent``, ``not-integer``, ``failed-check``) fires on
the answer of the step before it, and the last step run gives the final answer.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from puppeteer.envs.aggregate import CASCADE
from puppeteer.envs.listscan import match_lists
from puppeteer.tasks.signals import TRIGGERS
from puppeteer.types import Workflow
from puppeteer.utils.pyparse import literal_python

NAMES = ("model_id", "subtasks", "access_list")
MAX_LIST_CHARS = 20_000
MAX_SUBTASK_CHARS = 4_000
MAX_TEXT_CHARS = 200_000
MAX_GROUPS_TRIED = 16  # complete triples tried, last first (bounds literal_eval work)
_ASSIGN = re.compile(r"\b(model_id|subtasks|access_list)\b\s*[:=]\s*(?=\[)")
_FINAL = re.compile(r"^[ \t]*final[ \t]*=[ \t]*([^\n#]{1,40})", re.MULTILINE)  # a plan's own final answer
FINAL_WORDS = ("last", "vote")
# a cascade's conditions: every trigger but ``always`` (a fixed chain is a plan without a cascade)
CASCADE_TRIGGERS = tuple(t for t in TRIGGERS if t != "always")
CASCADE_WORDS = tuple(f"{CASCADE}{t}" for t in CASCADE_TRIGGERS)
# What may follow a list literal on its line: nothing, a separator, a comment or a closing fence.
# (Only the start of a comment is matched, so the checks read each character at most once.)
_AFTER = re.compile(r"[ \t]*(?:[,;]?[ \t]*(?:#|\n|$)|`{3}(?:\n|$))")


class WorkflowError(ValueError):
    """A workflow that cannot be parsed or is not valid for this pool."""


@dataclass(frozen=True)
class WorkflowLimits:
    max_steps: int = 5
    max_subtask_chars: int = MAX_SUBTASK_CHARS


@dataclass(frozen=True)
class PlanSpace:
    """What a valid plan of one planning round may contain (what a constrained conductor decodes in).

    ``available``: the agent ids on offer; ``self_id``: the conductor's own id, valid only as the last
    step, when it may still recurse; ``allow_empty``: three empty lists keep the last answer (an inner
    round). Given in a workflow-mode env's ``info["plan_space"]``.
    """

    available: tuple[int, ...]
    max_steps: int
    self_id: int | None = None
    allow_empty: bool = False
    final: bool = False  # the plan may name its final answer (a ``final = ...`` line)
    cascade: bool = False  # ... and that line may make it a cascade (``final = 'cascade:TRIGGER'``)


def _list_span(text: str, start: int) -> int | None:
    """Index one past the ``]`` matching ``text[start] == '['``, skipping string literals."""
    return match_lists(text, [start], MAX_LIST_CHARS).ends[0]


def _literal(text: str) -> object:
    try:
        return literal_python(text)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError) as e:
        raise WorkflowError(f"not a Python literal: {type(e).__name__}") from None


def _candidates(text: str) -> list[tuple[int, str, str]]:
    """Every ``name = [...]`` occurrence as (position, name, literal source); linear in ``len(text)``."""
    matches = list(_ASSIGN.finditer(text))
    ends = match_lists(text, [m.end() for m in matches], MAX_LIST_CHARS).ends
    found = []
    ok_after: dict[int, bool] = {}  # literals that end at the same place share the check
    for m, end in zip(matches, ends, strict=True):
        if end is not None and ok_after.setdefault(end, _AFTER.match(text, end) is not None):
            found.append((m.start(), m.group(1), text[m.end() : end]))
    return found


def extract_lists(text: str) -> tuple[object, object, object]:
    """The last complete triple of list literals in ``text``, in (model_id, subtasks, access_list) order.

    A triple is an occurrence of ``model_id`` followed by ``subtasks`` and ``access_list``
    before the next ``model_id``; the last one whose three literals parse wins.
    """
    return _extract(text)[0]


def extract_plan(text: str) -> tuple[tuple[object, object, object], object]:
    """:func:`extract_lists` and the triple's ``final = ...`` value (None where it has none)."""
    lists, (lo, hi), text = _extract(text)
    found = list(_FINAL.finditer(text, lo, hi))
    if not found:
        return lists, None
    value = found[-1].group(1).strip().removesuffix("```").strip().rstrip(",;").strip()
    try:
        final = literal_python(value)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        raise WorkflowError(
            f"final = {value!r:.40} is not a step index, 'last', 'vote' or 'cascade:TRIGGER'"
        ) from None
    return lists, final


def _extract(text: str) -> tuple[tuple[object, object, object], tuple[int, int], str]:
    """The winning triple, the span of text its group covers, and the (bounded) text searched."""
    if len(text) > MAX_TEXT_CHARS:
        text = text[-MAX_TEXT_CHARS:]
    cands = _candidates(text)
    starts = [i for i, (_, name, _) in enumerate(cands) if name == "model_id"]
    if not starts:
        raise WorkflowError("no 'model_id = [...]' list found")
    last_error: WorkflowError | None = None
    tried = 0
    for k in reversed(range(len(starts))):
        lo = starts[k]
        hi = starts[k + 1] if k + 1 < len(starts) else len(cands)
        group: dict[str, str] = {}
        for _, name, src in cands[lo:hi]:
            group[name] = src  # later restatements inside the group win
        missing = [n for n in NAMES if n not in group]
        if missing:
            last_error = WorkflowError(f"missing {', '.join(missing)} after model_id")
            continue
        if tried >= MAX_GROUPS_TRIED:
            break
        tried += 1
        try:
            lists = tuple(_literal(group[n]) for n in NAMES)
        except WorkflowError as e:
            last_error = e
            continue
        span = (cands[lo][0], cands[hi][0] if hi < len(cands) else len(text))
        return lists, span, text  # type: ignore[return-value]
    assert last_error is not None
    raise last_error


def validate(
    model_id: object,
    subtasks: object,
    access_list: object,
    n_agents: int,
    available: Sequence[bool] | None = None,
    limits: WorkflowLimits = WorkflowLimits(),
    final: object = None,
    cascade: bool = False,
) -> Workflow:
    """Check types, lengths, ids, access entries and ``final`` (None, ``'last'``, ``'vote'`` or a step
    index; a negative one counts from the end; with ``cascade``, also ``'cascade:TRIGGER'``); return a
    normalised :class:`Workflow`."""
    for name, value in zip(NAMES, (model_id, subtasks, access_list), strict=True):
        if not isinstance(value, list):
            raise WorkflowError(f"{name} must be a list, got {type(value).__name__}")
    assert isinstance(model_id, list) and isinstance(subtasks, list) and isinstance(access_list, list)
    n = len(model_id)
    if not (len(subtasks) == n and len(access_list) == n):
        raise WorkflowError(f"lists differ in length: {n}, {len(subtasks)}, {len(access_list)}")
    if n == 0:
        raise WorkflowError("empty workflow")
    if n > limits.max_steps:
        raise WorkflowError(f"{n} steps exceed the limit of {limits.max_steps}")
    ids: list[int] = []
    for i, m in enumerate(model_id):
        if isinstance(m, bool) or not isinstance(m, int):
            raise WorkflowError(f"model_id[{i}] must be an int, got {m!r:.40}")
        if not 0 <= m < n_agents:
            raise WorkflowError(f"model_id[{i}] = {m} out of range 0..{n_agents - 1}")
        if available is not None and not available[m]:
            raise WorkflowError(f"model_id[{i}] = {m} is not available")
        ids.append(m)
    tasks: list[str] = []
    for i, s in enumerate(subtasks):
        if not isinstance(s, str) or not s.strip():
            raise WorkflowError(f"subtasks[{i}] must be a non-empty string")
        if len(s) > limits.max_subtask_chars:
            raise WorkflowError(f"subtasks[{i}] is longer than {limits.max_subtask_chars} characters")
        tasks.append(s.strip())
    access: list[str | tuple[int, ...]] = []
    for i, a in enumerate(access_list):
        if a == "all" or (isinstance(a, list | tuple) and len(a) == 1 and a[0] == "all"):
            access.append("all")  # ["all"] is a common way of writing "all"
            continue
        if isinstance(a, int) and not isinstance(a, bool):
            a = [a]  # a bare index k means [k] (small conductors write access_list = [[], 0])
        if not isinstance(a, list | tuple):
            raise WorkflowError(
                f"access_list[{i}] must be 'all' or a list of earlier step indices "
                f"(['all'] also means 'all', a bare index k means [k]), "
                f"got {a!r:.40}"
            )
        for j in a:
            if isinstance(j, bool) or not isinstance(j, int) or not 0 <= j < i:
                raise WorkflowError(f"access_list[{i}] names {j!r}, not an earlier step (0..{i - 1})")
        access.append(tuple(sorted(set(a))))
    return Workflow(
        model_id=tuple(ids),
        subtasks=tuple(tasks),
        access_list=tuple(access),
        final=_final(final, n, cascade),
    )


def _final(final: object, n: int, cascade: bool = False) -> str | int | None:
    """A plan's ``final`` checked against its ``n`` steps (a negative index counts from the end)."""
    if final is None or final in FINAL_WORDS:
        return final  # type: ignore[return-value]
    if isinstance(final, str) and final.startswith(CASCADE):
        if not cascade:
            raise WorkflowError("this env offers no cascades (aggregate='cascade' does)")
        if final not in CASCADE_WORDS:
            raise WorkflowError(f"final = {final!r:.40}: a cascade is one of {', '.join(CASCADE_WORDS)}")
        if n < 2:
            raise WorkflowError("a cascade needs two steps or more")
        return final
    if isinstance(final, bool) or not isinstance(final, int):
        raise WorkflowError(f"final must be a step index, 'last' or 'vote', got {final!r:.40}")
    if not -n <= final < n:
        raise WorkflowError(f"final = {final} is not a step (0..{n - 1})")
    return final % n


def parse_workflow(
    text: str,
    n_agents: int,
    available: Sequence[bool] | None = None,
    limits: WorkflowLimits = WorkflowLimits(),
    *,
    final: bool = False,
    cascade: bool = False,
) -> Workflow:
    """Parse and validate a conductor completion. Raises :class:`WorkflowError` with the reason.

    ``final``: read the plan's ``final = ...`` line too (else a plan's ``final`` is not read);
    ``cascade``: that line may name a cascade."""
    if not isinstance(text, str):
        raise WorkflowError(f"a workflow action is text, got {type(text).__name__}")
    if not final:
        return validate(*extract_lists(text), n_agents=n_agents, available=available, limits=limits)
    lists, chosen = extract_plan(text)
    return validate(
        *lists, n_agents=n_agents, available=available, limits=limits, final=chosen, cascade=cascade
    )


def visible_steps(workflow: Workflow, index: int) -> tuple[int, ...]:
    """Indices of the earlier steps that step ``index`` sees."""
    access = workflow.access_list[index]
    return tuple(range(index)) if access == "all" else tuple(access)


def format_workflow(workflow: Workflow) -> str:
    """The canonical text form, which :func:`parse_workflow` reads back to the same workflow."""
    access = [a if a == "all" else list(a) for a in workflow.access_list]
    text = (
        f"model_id = {list(workflow.model_id)!r}\n"
        f"subtasks = {list(workflow.subtasks)!r}\n"
        f"access_list = {access!r}"
    )
    return text if workflow.final is None else f"{text}\nfinal = {workflow.final!r}"
