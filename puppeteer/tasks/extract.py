"""Pull a final answer out of free-form model output.

Every extractor works on the last ``TAIL_CHARS`` characters only and uses regexes
without nested quantifiers, so a multi-megabyte completion costs milliseconds.

Candidates come in two strengths. *Strong* ones are explicit: ``\\boxed{...}``,
"Answer: X", "the answer is X", "#### X", "### Final Answer", "the correct option is B".
*Weak* ones are whatever looks like an answer (the last number, a lone "(B)"). The
latest strong candidate wins; only without any do we fall back to the latest weak one.
Small models often keep going after answering ("Question: ..." for a made-up next
problem); text after such a continuation marker is ignored when a strong answer
precedes it.

``committed_only=True`` keeps the strong candidates only. The executor asks for it when a
generation was cut off at its token budget: a truncated chain of thought that never stated an
answer gave none, and its last intermediate number or a listed option must not count.
"""

from __future__ import annotations

import functools
import re
import textwrap
from collections.abc import Callable
from decimal import Decimal, localcontext
from fractions import Fraction
from typing import TypeVar, cast

from puppeteer.utils.pyparse import parse_python

TAIL_CHARS = 20_000
_WINDOW = 300
_MAX_CUTS = 5
_CODE_PARSE_LIMIT = 200_000
_MAX_NUMBER_CHARS = 400

# --------------------------------------------------------------------------- helpers

_CONTINUATION_RE = re.compile(
    r"<\|(?:im_start|im_end|endoftext|eot_id|end)\|>|</s>"
    r"|\n[ \t]*(?:#+[ \t]*)?(?:Question|Problem|Human|User|Q)[ \t]*\d*[ \t]*:"
)
_MARKER_RE = re.compile(
    r"(?i)\b(?:final\s+)?answer(?:\s+to\s+(?:the|this)\s+(?:question|problem))?[ \t]*\**[ \t]*"
    r"(?:is\b|was\b|would\s+be\b|will\s+be\b|should\s+be\b|[:=])"
    r"|(?:#+[ \t]*|\*\*)(?:final\s+)?answer[ \t]*\**[ \t]*:?[ \t]*\**[ \t]*\n"
    r"|####"
    r"|\bcorrect\s+(?:option|choice|letter)\s*(?:is\b|[:=])"
    r"|\b(?:option|choice)\s+is\b"
)
_BRACE_RE = re.compile(r"\\.|[{}]", re.DOTALL)
_BOXED_RE = re.compile(r"\\(?:boxed|fbox)(?![A-Za-z])")
_LATEX_FRAC_RE = re.compile(r"\\[dt]?frac\s*\{\s*(-?[\d.,]+)\s*\}\s*\{\s*(-?[\d.,]+)\s*\}")
_NUMBER_RE = re.compile(
    r"(?<![\w.])"
    r"(?P<sign>[-−]\s?)?\$?\s?"
    r"(?P<num>\d{1,3}(?:,\d{3})+(?![\d,])(?:\.\d+)?|\d+(?:\.\d+)?|\.\d+)"
    r"(?:[ \t]?/[ \t]?(?P<den>\d+(?:\.\d+)?))?"
)
_THINK_RE = re.compile(r"</think>", re.IGNORECASE)


def tail(text: str, limit: int = TAIL_CHARS) -> str:
    """The last ``limit`` characters, where final answers live; reasoning blocks are dropped."""
    text = text[-limit:] if len(text) > limit else text
    closes = [m.end() for m in _THINK_RE.finditer(text)]
    if closes and text[closes[-1] :].strip():
        text = text[closes[-1] :]
    return text


def _latest(cands: list[tuple[int, str]]) -> str | None:
    return max(cands, key=lambda c: c[0])[1] if cands else None


def _cut_then(
    text: str,
    strong: Callable[[str], str | None],
    weak: Callable[[str], str | None],
    committed_only: bool = False,
) -> str | None:
    """Strong answer before a hallucinated continuation, else strong/weak answer of the whole text."""
    for i, m in enumerate(_CONTINUATION_RE.finditer(text)):
        if i >= _MAX_CUTS:
            break
        if m.start() == 0:
            continue
        found = strong(text[: m.start()])
        if found is not None:
            return found
    found = strong(text)
    return found if found is not None or committed_only else weak(text)


def _marker_windows(text: str) -> list[tuple[int, str]]:
    """(position, following text) for every answer marker; the window ends at a blank line."""
    out = []
    for m in _MARKER_RE.finditer(text):
        window = text[m.end() : m.end() + _WINDOW]
        stripped = window.lstrip(" \t\n:*#=")
        lead = len(window) - len(stripped)
        blank = stripped.find("\n\n")
        out.append((m.start(), window[: lead + blank] if blank >= 0 else window))
    return out


# --------------------------------------------------------------------------- boxed


def _brace_pairs(text: str) -> dict[int, int]:
    """Index of each '{' -> index of its matching '}', in one pass (escaped braces are skipped)."""
    pairs: dict[int, int] = {}
    stack: list[int] = []
    for m in _BRACE_RE.finditer(text):
        ch = m.group(0)
        if ch == "{":
            stack.append(m.start())
        elif ch == "}" and stack:
            pairs[stack.pop()] = m.start()
    return pairs


def _boxed_candidates(text: str) -> list[tuple[int, str]]:
    out = []
    pairs: dict[int, int] | None = None
    for m in _BOXED_RE.finditer(text):
        j = m.end()
        while j < len(text) and text[j] in " \t":
            j += 1
        content: str | None
        if j < len(text) and text[j] == "{":
            if pairs is None:
                pairs = _brace_pairs(text)
            close = pairs.get(j)
            content = text[j + 1 : close] if close is not None else None
        else:
            word = re.match(r"[^\s$]+", text[j : j + 100])
            content = word.group(0) if word else None
        if content and content.strip():
            out.append((m.start(), content.strip()))
    return out


def extract_boxed(text: str) -> str | None:
    """Content of the last non-empty ``\\boxed{...}`` (nested braces kept), or None."""
    return _latest(_boxed_candidates(tail(text)))


# --------------------------------------------------------------------------- numbers


def _decimal_string(value: Fraction) -> str:
    with localcontext() as ctx:
        ctx.prec = 200
        dec = Decimal(value.numerator) / Decimal(value.denominator)
    out = format(dec.normalize(), "f")
    return "0" if out in ("-0", "0") else out


_PLAIN_NUMBER = r"(?:\d{1,3}(?:,\d{3})+(?:\.\d+)?|\d*\.?\d+)"
_STRICT_NUMBER_RE = re.compile(rf"([-+]?{_PLAIN_NUMBER})(?:/([-+]?{_PLAIN_NUMBER}))?")


@functools.lru_cache(maxsize=65_536)  # answers and golds are parsed again at every grade of an item
def number_value(text: str) -> Fraction | None:
    """Exact value of a number string such as '-1,234.50', '$3', '45%', '3/4', '\\frac{3}{4}'; else None."""
    s = _LATEX_FRAC_RE.sub(r"\1/\2", text.strip())
    for old, new in (("−", "-"), ("\\!", ""), ("{,}", ","), ("\\$", ""), ("\\%", ""), ("$", ""), ("%", "")):
        s = s.replace(old, new)
    s = re.sub(r"\s+", "", s).rstrip(".")
    if len(s) > _MAX_NUMBER_CHARS:
        return None
    m = _STRICT_NUMBER_RE.fullmatch(s)
    if m is None:
        return None
    numerator = Fraction(m.group(1).replace(",", ""))
    if m.group(2) is None:
        return numerator
    denominator = Fraction(m.group(2).replace(",", ""))
    return None if denominator == 0 else numerator / denominator


_PLAIN_INT_RE = re.compile(r"-?[0-9]{1,300}")


def normalize_number(text: str) -> str | None:
    """Canonical string of a number: '1,234.0' -> '1234', '0.50' -> '0.5', '6/8' -> '0.75', '1/3' -> '1/3'."""
    if _PLAIN_INT_RE.fullmatch(text):  # the common case, without a Fraction: the same string
        return str(int(text))
    value = number_value(text)
    if value is None:
        return None
    if value.denominator == 1:
        return str(value.numerator)
    rest = value.denominator
    for p in (2, 5):
        while rest % p == 0:
            rest //= p
    if rest == 1:
        return _decimal_string(value)
    return f"{value.numerator}/{value.denominator}"


def _prepare_numbers(text: str) -> str:
    text = _LATEX_FRAC_RE.sub(r"\1/\2", text)
    return text.replace("\\$", "$").replace("\\%", "%").replace("{,}", ",").replace("\\!", "")


def _numbers(text: str) -> list[str]:
    out = []
    for m in _NUMBER_RE.finditer(_prepare_numbers(text)):
        raw = ("-" if m.group("sign") else "") + m.group("num")
        if m.group("den"):
            raw += "/" + m.group("den")
        norm = normalize_number(raw)
        if norm is not None:
            out.append(norm)
    return out


def _last_number(text: str) -> str | None:
    nums = _numbers(text)
    return nums[-1] if nums else None


def _first_number(text: str) -> str | None:
    m = _NUMBER_RE.search(_prepare_numbers(text))
    return _numbers(m.group(0))[0] if m else None


def _window_number(window: str) -> str | None:
    """Number right after a marker: on its first line (after the last '=' if any), else in its paragraph."""
    body = window.lstrip(" \t\n:*#=")
    line = body.split("\n", 1)[0]
    if "=" in line and (n := _first_number(line.rsplit("=", 1)[1])) is not None:
        return n
    n = _first_number(line)
    return n if n is not None else _first_number(body)


def _strong_number(text: str) -> str | None:
    cands = [(pos, n) for pos, content in _boxed_candidates(text) if (n := _last_number(content)) is not None]
    cands += [(pos, n) for pos, window in _marker_windows(text) if (n := _window_number(window)) is not None]
    return _latest(cands)


# answer lines (a simulated worker's vouched last line, a grader's own answer) are extracted again and
# again, item after item; long texts (a real model's reasoning) are not kept
SHORT_TEXT_CHARS = 120

E = TypeVar("E", bound=Callable[..., "str | None"])


def _memoise_short(extract: E) -> E:
    """``extract(text, committed_only)`` memoised process-wide for texts of at most
    :data:`SHORT_TEXT_CHARS` characters (the extractor must be a pure function of its arguments)."""
    short = functools.lru_cache(maxsize=65_536)(extract)

    @functools.wraps(extract)
    def memoised(text: str, committed_only: bool = False) -> str | None:
        return short(text, committed_only) if len(text) <= SHORT_TEXT_CHARS else extract(text, committed_only)

    return cast(E, memoised)


@_memoise_short
def extract_number(text: str, committed_only: bool = False) -> str | None:
    """The final numeric answer, normalized with :func:`normalize_number`, or None."""
    return _cut_then(tail(text), _strong_number, _last_number, committed_only)


# --------------------------------------------------------------------------- math expressions

_MATH_WRAPPERS = ("$$", "$", "\\(", "\\)", "\\[", "\\]", "**")


def _clean_math(s: str) -> str:
    s = s.strip()
    for w in _MATH_WRAPPERS:
        s = s.replace(w, "")
    s = s.strip().rstrip(".").strip()
    inner = re.fullmatch(r"\\(?:text|textbf|mathrm)\{(.*)\}", s)
    return inner.group(1).strip() if inner else s


def _marker_expression(window: str) -> str | None:
    line = window.lstrip(" \t\n:*#=")
    line = line.split("\n", 1)[0]
    boxed = _latest(_boxed_candidates(line))
    if boxed is None and "=" in line:
        line = line.rsplit("=", 1)[1]
    value = _clean_math(boxed if boxed is not None else line)
    return value or None


def _strong_math(text: str) -> str | None:
    cands = list(_boxed_candidates(text))
    cands += [(pos, e) for pos, window in _marker_windows(text) if (e := _marker_expression(window))]
    return _latest(cands)


@_memoise_short
def extract_math(text: str, committed_only: bool = False) -> str | None:
    """The final answer as a (LaTeX) expression: boxed, after an answer marker, else the last number."""
    return _cut_then(tail(text), _strong_math, _last_number, committed_only)


def normalize_math(answer: str) -> str:
    """Canonical-ish string of a math answer so that equal answers vote together."""
    s = _clean_math(answer)
    number = normalize_number(s)
    if number is not None:
        return number
    s = re.sub(r"\\[dt]frac", r"\\frac", s)
    s = re.sub(r"\\(?:left|right)(?![A-Za-z])", "", s)
    s = re.sub(r"\^\{?\\circ\}?", "", s)
    s = s.replace("\\!", "").replace("\\,", "").replace("\\;", "").replace("\\ ", "")
    return re.sub(r"\s+", "", s)


# --------------------------------------------------------------------------- letters


def _letters(n_choices: int) -> str:
    if not 2 <= n_choices <= 26:
        raise ValueError(f"n_choices must be in 2..26, got {n_choices}")
    return "ABCDEFGHIJKLMNOPQRSTUVWXYZ"[:n_choices]


def _letter_patterns(
    letters: str,
) -> tuple[re.Pattern[str], re.Pattern[str], tuple[re.Pattern[str], ...], re.Pattern[str]]:
    cls = f"[{letters}]"
    in_window = re.compile(rf"(?<![A-Za-z])\(?\**\(?({cls})\)?\**(?![A-Za-z'])")
    boxed = re.compile(rf"^\s*(?:\\text(?:bf)?\{{)?\(?({cls})(?![A-Za-z])")
    weak = (  # tiers, most explicit first; within a tier the last occurrence wins
        re.compile(
            rf"\*\*\(?({cls})\)?[.:)]?\*\*"  # **B** / **(B)** / **B)**
            rf"|(?m:^[ \t>*-]*\(?({cls})\)?[.:]?[ \t]*$)"  # a line that is only 'B' / '(B)' / 'B)' / 'B.'
            rf"|\b(?:option|choice)\s+\(?({cls})\b"  # option B
        ),
        re.compile(rf"\(({cls})\)"),  # (B) inside a sentence
    )
    option_line = re.compile(rf"(?m:^[ \t]*({cls})[).:][ \t])")  # 'B) text' at a line start
    return in_window, boxed, weak, option_line


def extract_letter(text: str, n_choices: int = 4, committed_only: bool = False) -> str | None:
    """The chosen option letter (upper case) among the first ``n_choices`` letters, or None."""
    in_window, boxed, weak, option_line = _letter_patterns(_letters(n_choices))

    def strong(t: str) -> str | None:
        cands = [(pos, m.group(1)) for pos, c in _boxed_candidates(t) if (m := boxed.match(c))]
        for pos, window in _marker_windows(t):
            line = window.lstrip(" \t\n:*#=").split("\n", 1)[0]
            if m := in_window.search(line):
                cands.append((pos, m.group(1)))
        return _latest(cands)

    def fallback(t: str) -> str | None:
        for tier in weak:
            last = None
            for m in tier.finditer(t):
                last = next(g for g in m.groups() if g)
            if last is not None:
                return last
        # Last resort, an option line 'B) text' (a direct answer that restates its option). Lines
        # for several letters are the options listed or analysed one by one (often cut off at
        # max_tokens): that chooses none of them, and the last one listed must not win.
        listed = {m.group(1) for m in option_line.finditer(t)}
        return listed.pop() if len(listed) == 1 else None

    return _cut_then(tail(text), strong, fallback, committed_only)


# --------------------------------------------------------------------------- free text


_ANSWER_TAG_RE = re.compile(r"<answer>(.*?)</answer>", re.DOTALL | re.IGNORECASE)


def _strong_text(text: str) -> str | None:
    cands = [(pos, _clean_math(c)) for pos, c in _boxed_candidates(text)]
    cands += [(m.start(), m.group(1).strip()) for m in _ANSWER_TAG_RE.finditer(text) if m.group(1).strip()]
    for pos, window in _marker_windows(text):
        line = window.lstrip(" \t\n:*#=").split("\n", 1)[0]
        if value := _clean_math(line):
            cands.append((pos, value))
    return _latest(cands)


def _last_line(text: str) -> str | None:
    for line in reversed(text.splitlines()):
        if value := _clean_math(line):
            return value
    return None


def extract_final_text(text: str, committed_only: bool = False) -> str | None:
    """A free-text final answer: boxed, <answer> tags, after a marker, else the last non-empty line."""
    return _cut_then(tail(text), _strong_text, _last_line, committed_only)


# --------------------------------------------------------------------------- code

_FENCE_RE = re.compile(r"```[ \t]*([\w+.-]*)[ \t]*\n")
_PY_TAGS = frozenset({"python", "py", "python3", "py3", ""})
_DEF_RE = re.compile(r"(?m)^[ \t]*(?:async[ \t]+)?(?:def|class)[ \t]")
_CODE_LINE_RE = re.compile(r"(?m)^[ \t]*(?:def |class |import |from \S+ import |return\b|for |while |if )")


def _code_blocks(text: str) -> list[tuple[str, str]]:
    """(language tag, body) of every fenced block; an unclosed last fence runs to the end."""
    blocks = []
    pos = 0
    while (m := _FENCE_RE.search(text, pos)) is not None:
        end = text.find("```", m.end())
        body = text[m.end() :] if end < 0 else text[m.end() : end]
        blocks.append((m.group(1).lower(), body))
        if end < 0:
            break
        pos = end + 3
    return blocks


def _looks_like_code(text: str) -> bool:
    if len(text) > _CODE_PARSE_LIMIT or not _CODE_LINE_RE.search(text):
        return False
    try:
        parse_python(textwrap.dedent(text))
    except (SyntaxError, ValueError):
        return False
    return True


def _trim_code(body: str) -> str:
    lines = body.rstrip().splitlines()
    while lines and not lines[0].strip():
        lines.pop(0)
    return "\n".join(lines)


def extract_code(text: str, entry_point: str | None = None) -> str | None:
    """The code answer in ``text``.

    Among fenced blocks tagged python (or untagged) the last one that defines ``entry_point``
    wins, else the last one with any ``def``/``class`` (a trailing usage example does not
    replace the solution), else the last python block, else the last fenced block of any
    language. Without fences, the whole text if it parses as Python.
    """
    blocks = _code_blocks(text)
    python = [b for tag, b in blocks if tag in _PY_TAGS and b.strip()]
    wanted = re.compile(rf"(?m)^\s*(?:async\s+)?def\s+{re.escape(entry_point)}\s*\(") if entry_point else None
    chosen = next((b for b in reversed(python) if wanted and wanted.search(b)), None)
    if chosen is None:
        chosen = next((b for b in reversed(python) if _DEF_RE.search(b)), None)
    if chosen is None:
        chosen = python[-1] if python else next((b for _, b in reversed(blocks) if b.strip()), None)
    if chosen is not None:
        return _trim_code(chosen)
    if _looks_like_code(text):
        return _trim_code(text)
    return None
