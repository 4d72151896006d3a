"""What simulated answers look like: an item's gold answer and kind (:class:`SimItem`), canonical
forms for comparing answers, per-item distractors (the wrong answers workers agree on) and the text of a
simulated completion around its final answer. :mod:`puppeteer.backends.sim` draws who is right."""

from __future__ import annotations

import functools
import hashlib
import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType


@dataclass(frozen=True)
class SimItem:
    """What the simulator knows about one item: its gold answer and how answers look."""

    gold: str
    domain: str
    kind: str = "numeric"  # numeric | letter | math | code | text
    choices: tuple[str, ...] = ()
    visible_x: float | None = None  # the question's visible difficulty feature (sim/difficulty.py)


_BOXED = re.compile(r"\\boxed\s*\{")
_LETTER = re.compile(r"^[\(\[]?([A-Za-z])[\)\]\.:]?(?:\s|$)")
_NUMBER = re.compile(r"^[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?$")
# a whole number already written as normalize_answer writes it (no sign on zero, no leading zeros, at
# most 15 characters: below 1e15, where a float holds it exactly)
_CANONICAL_INT = re.compile(r"0|-?[1-9][0-9]{0,13}|[1-9][0-9]{14}")


def _unbox(s: str) -> str:
    match = None
    for match in _BOXED.finditer(s):  # noqa: B007 - keep the last \boxed
        pass
    if match is None:
        return s
    depth, start = 1, match.end()
    for i in range(start, len(s)):
        if s[i] == "{":
            depth += 1
        elif s[i] == "}":
            depth -= 1
            if depth == 0:
                return s[start:i]
    return s[start:]


def _canonical_number(s: str) -> str | None:
    t = s.replace(",", "").replace("$", "").strip()
    if not _NUMBER.match(t):
        return None
    x = float(t)
    if math.isfinite(x) and x == int(x) and abs(x) < 1e15:
        return str(int(x))
    return format(x, ".10g")


def normalize_answer(answer: str, kind: str = "text") -> str:
    """A loose canonical form used to compare visible answers with the gold (idempotent)."""
    s = str(answer).strip()
    if kind in ("numeric", "math") and _CANONICAL_INT.fullmatch(s):  # the common case: already canonical
        return s
    if kind == "code":
        lines = [line.rstrip() for line in s.strip("`").removeprefix("python").splitlines()]
        return "\n".join(line for line in lines if line.strip())
    s = _unbox(s).strip().strip("$").strip()
    s = s.rstrip(".").strip()
    if kind == "letter":
        m = _LETTER.match(s)
        return m.group(1).upper() if m else s.upper()
    if kind in ("numeric", "math"):
        number = _canonical_number(s)
        if number is not None:
            return number
        if kind == "math":
            for old, new in (
                ("\\left", ""),
                ("\\right", ""),
                ("\\!", ""),
                ("dfrac", "frac"),
                ("tfrac", "frac"),
                (" ", ""),
            ):
                s = s.replace(old, new)
            return s
        return s.replace(",", "").strip()
    return " ".join(s.lower().split()).strip(" .!")


def display_answer(answer: str, kind: str = "text") -> str:
    """How the simulator writes an answer: canonical where that is safe, else the original text."""
    if kind == "code":  # keep the first line's indentation: a function body is indented
        return "\n".join(line.rstrip() for line in str(answer).splitlines()).strip("\n")
    if kind in ("letter", "numeric"):
        return normalize_answer(answer, kind)
    s = _unbox(str(answer).strip()).strip().strip("$").strip()
    if kind == "math":
        return _canonical_number(s) or s
    return " ".join(s.split())


# the answers of earlier steps, normalized at every call that sees them: a few distinct strings
_normalized = functools.lru_cache(maxsize=65_536)(normalize_answer)
_displayed = functools.lru_cache(maxsize=65_536)(display_answer)


# --------------------------------------------------------------------------- distractors


def _fill(gold_norm: str, kind: str, candidates: Sequence[str], n: int) -> tuple[str, ...]:
    out: list[str] = []
    seen = {gold_norm}
    for c in candidates:
        key = _normalized(c, kind)  # candidates near the gold: the same few numbers across items
        if key not in seen:
            seen.add(key)
            out.append(c)
        if len(out) == n:
            break
    k = 2
    while len(out) < n:  # generic fallback keeps the set size stable
        c = f"{candidates[0] if candidates else gold_norm} ({k})"
        k += 1
        if normalize_answer(c, kind) not in seen:
            seen.add(normalize_answer(c, kind))
            out.append(c)
    return tuple(out)


def _numeric_candidates(number: str, h: int) -> list[str]:
    x = float(number)
    d = 1 + h % 9
    if x == int(x):
        g = int(x)
        pool = [g + d, g - d, 2 * g if g else g + 2 * d + 1, g // 2 if g > 1 else g + 10, g + 10 * d, g * 10]
        order = [pool[(h >> 4) % 2], pool[2 + (h >> 5) % 2], pool[4 + (h >> 6) % 2], *pool]
        return [str(v) for v in order]
    pool = [x + d, x - d, 2 * x, x / 2, x * 10]
    return [format(v, ".10g") for v in pool]


def _numeric_distractors(item: SimItem, h: int, n: int) -> tuple[str, ...]:
    number = _canonical_number(item.gold)
    if number is None:
        return _text_distractors(item, h, n)
    return _fill(number, "numeric", _numeric_candidates(number, h), n)


def _letters(item: SimItem) -> tuple[str, ...]:
    if item.choices and all(len(c.strip("() ")) == 1 for c in item.choices):
        return tuple(c.strip("() ").upper() for c in item.choices)
    count = len(item.choices) if item.choices else 4
    return tuple(chr(ord("A") + i) for i in range(count))


def _letter_distractors(item: SimItem, h: int, n: int) -> tuple[str, ...]:
    gold = normalize_answer(item.gold, "letter")
    others = [c for c in _letters(item) if c != gold]
    if not others:
        others = [c for c in "ABCD" if c != gold]
    shift = h % len(others)
    ordered = others[shift:] + others[:shift]
    return tuple(ordered[:n])


_INT_RUN = re.compile(r"\d+")


def _math_distractors(item: SimItem, h: int, n: int) -> tuple[str, ...]:
    gold = normalize_answer(item.gold, "math")
    number = _canonical_number(gold)
    if number is not None:
        return _fill(number, "math", _numeric_candidates(number, h), n)
    runs = list(_INT_RUN.finditer(gold))
    candidates: list[str] = []
    if runs:
        first, last = runs[0], runs[-1]
        candidates.append(gold[: first.start()] + str(int(first.group()) + 1) + gold[first.end() :])
        candidates.append(gold[: last.start()] + str(int(last.group()) + 2) + gold[last.end() :])
    candidates.append(gold[1:] if gold.startswith("-") else f"-{gold}")
    candidates.append(f"2{gold}")
    candidates.append("0")
    return _fill(gold, "math", candidates, n)


_DEF_HEAD = re.compile(r"^(?P<indent>[ \t]*)def [^\n]*?:[ \t]*(?:#[^\n]*)?$", re.MULTILINE)
_BROKEN_BODIES = ("return None", "raise NotImplementedError", "return []")


def _code_distractors(item: SimItem, h: int, n: int) -> tuple[str, ...]:
    match = _DEF_HEAD.search(item.gold)
    if match is None:
        head, indent = "def solution(*args, **kwargs):", "    "
    else:
        head, indent = item.gold[: match.end()], match.group("indent") + "    "
    shift = h % len(_BROKEN_BODIES)
    bodies = _BROKEN_BODIES[shift:] + _BROKEN_BODIES[:shift]
    return _fill(normalize_answer(item.gold, "code"), "code", [f"{head}\n{indent}{b}" for b in bodies], n)


_FLIPS = {"knight": "knave", "knave": "knight", "true": "false", "false": "true", "yes": "no", "no": "yes"}
_FLIP_WORD = re.compile(r"\b(" + "|".join(_FLIPS) + r")\b", re.IGNORECASE)


def _flip(match: re.Match[str]) -> str:
    word = match.group(0)
    new = _FLIPS[word.lower()]
    return new.capitalize() if word[0].isupper() else new


def _text_distractors(item: SimItem, h: int, n: int) -> tuple[str, ...]:
    gold = item.gold.strip()
    candidates: list[str] = []
    if _FLIP_WORD.search(gold):
        spans = list(_FLIP_WORD.finditer(gold))
        pick = spans[h % len(spans)]
        candidates.append(gold[: pick.start()] + _flip(pick) + gold[pick.end() :])
        candidates.append(_FLIP_WORD.sub(_flip, gold))
        for span in (spans[0], spans[-1]):
            candidates.append(gold[: span.start()] + _flip(span) + gold[span.end() :])
    words = gold.split()
    candidates.append(" ".join(reversed(words)))
    candidates.append(f"not {gold}")
    candidates.append(f"{gold} or something else")
    return _fill(normalize_answer(gold, "text"), "text", candidates, n)


DistractorMaker = Callable[[SimItem, int, int], tuple[str, ...]]

DISTRACTORS: Mapping[str, DistractorMaker] = MappingProxyType(
    {
        "numeric": _numeric_distractors,
        "letter": _letter_distractors,
        "math": _math_distractors,
        "code": _code_distractors,
        "text": _text_distractors,
    }
)


def distractors(item: SimItem, seed: int = 0, n: int = 3) -> tuple[str, ...]:
    """The item's wrong answers, most popular first (deterministic in the item and seed)."""
    digest = hashlib.blake2b(f"{seed}|d|{item.gold}|{item.domain}".encode(), digest_size=8).digest()
    h = int.from_bytes(digest, "little")
    try:
        maker = DISTRACTORS[item.kind]
    except KeyError:
        raise ValueError(f"unknown SimItem kind {item.kind!r}; known: {', '.join(DISTRACTORS)}") from None
    return maker(item, h, n)


# --------------------------------------------------------------------------- rendering


_FILLER = (
    "Let me restate what is being asked and identify the quantities involved.",
    "I will work through this carefully, one step at a time.",
    "First, I set up the relationships given in the problem.",
    "Next, I simplify the expression and keep track of each term.",
    "Checking the intermediate result against the constraints, it is consistent.",
    "Now I combine the partial results.",
    "A quick sanity check on the magnitude suggests this is reasonable.",
    "I consider the alternatives and rule out the ones that contradict the conditions.",
    "Putting everything together gives the final result.",
    "Let me double-check the arithmetic in the previous step.",
)
_OPENERS: Mapping[str, str] = MappingProxyType(
    {
        "direct": "",
        "plan": "Plan: understand the question, break it into parts, solve each part, then combine.",
        "verify": "I will verify the earlier answer by re-deriving it independently.",
        "critique": "Let me critique the previous reasoning and look for mistakes.",
        "reflect": "Reflecting on the earlier attempt, I re-examine each step.",
        "refine": "I will refine the earlier solution and correct anything that is off.",
        "summarize": "Summarizing the earlier answers and their reasoning:",
    }
)


# The reasoning lines (openers and filler) hold nothing an answer extractor reads: no answer marker,
# box, digit, lone option letter, code fence or continuation marker ("Question:"). The final answer
# part that follows them (``_render_final``) is therefore all an extractor needs, and completions
# carry it as ``Completion.answer_text`` (tests/envs/test_sim_fast_path.py checks every line against every
# built-in grader).


def _reasoning(pattern: str, completion_tokens: int, h: int) -> list[str]:
    if pattern == "direct":
        return []
    lines = [_OPENERS[pattern]] if _OPENERS.get(pattern) else []
    count = max(1, min(8, completion_tokens // 80))
    lines.extend(_FILLER[(h + 3 * i) % len(_FILLER)] for i in range(count))
    return lines


@functools.lru_cache(maxsize=4096)
def _reasoning_prefix(pattern: str, count: int, shift: int) -> str:
    """The reasoning lines of ``_reasoning`` joined, each ending in a newline (one string per shape)."""
    lines = _reasoning(pattern, 80 * count, shift)
    return "".join(line + "\n" for line in lines)


def _render_final(answer: str, kind: str) -> str:
    if kind == "letter":
        return f"Answer: ({answer})"
    if kind == "math":
        return f"So the final answer is $\\boxed{{{answer}}}$.\nAnswer: {answer}"
    if kind == "code":
        return f"Here is the implementation:\n```python\n{answer}\n```"
    return f"Answer: {answer}"
