"""Answer extraction on adversarial and synthetic text, and on recorded outputs of the local models."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from puppeteer.tasks.extract import (
    extract_boxed,
    extract_code,
    extract_final_text,
    extract_letter,
    extract_math,
    extract_number,
    normalize_math,
    normalize_number,
)

# --------------------------------------------------------------------------- numbers


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("1,234.0", "1234"),
        ("$1,234.50", "1234.5"),
        ("-0.50", "-0.5"),
        ("45%", "45"),
        ("3/4", "0.75"),
        ("6/8", "0.75"),
        ("1/3", "1/3"),
        ("\\frac{2}{6}", "1/3"),
        ("−7", "-7"),
        ("007", "7"),
        ("-0", "0"),
        ("12.", "12"),
        ("1/0", None),
        ("1, 2", None),
        ("abc", None),
        ("1.2.3", None),
    ],
)
def test_normalize_number(raw: str, expected: str | None) -> None:
    assert normalize_number(raw) == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("The answer is 18.", "18"),
        ("So she makes $18 every day.", "18"),
        ("Total: 1,234 apples", "1234"),
        ("It drops to -5 degrees.", "-5"),
        ("We get 3 - 5 = -2", "-2"),
        ("The ratio is 3/4.", "0.75"),
        ("About 12.50 dollars", "12.5"),
        ("The growth is 40%.", "40"),
        ("x = .5", "0.5"),
        ("Answer: 16 - 3 - 4 = 9", "9"),
        ("#### 72", "72"),
        ("value \\boxed{\\frac{3}{4}}", "0.75"),
        ("The final answer is $\\boxed{1{,}000}$.", "1000"),
    ],
)
def test_extract_number_forms(text: str, expected: str) -> None:
    assert extract_number(text) == expected


def test_several_answers_take_the_last_explicit_one() -> None:
    text = "First I thought the answer is 12. Wait, that's wrong. Recomputing... The answer is 14."
    assert extract_number(text) == "14"
    boxed = "\\boxed{12} hmm, no: 5 + 9 = 14 so \\boxed{14}"
    assert extract_number(boxed) == "14"


def test_explicit_answer_beats_later_numbers() -> None:
    text = "Answer: 18\n\nExplanation: she has 16 - 3 - 4 = 9 eggs and sells them for $2 each, 9 * 2."
    assert extract_number(text) == "18"


def test_no_answer_gives_none() -> None:
    assert extract_number("I am not sure how to solve this problem.") is None
    assert extract_number("") is None
    assert extract_letter("I cannot decide between the options.") is None
    assert extract_boxed("no box here, only \\boxed{} empty") is None
    assert extract_code("Sorry, I can't write that.") is None


def test_hallucinated_next_question_is_ignored() -> None:
    # Small instruct models often continue with a made-up follow-up exercise.
    text = (
        "She has 16 - 3 - 4 = 9 eggs left, so she earns 9 * 2 = 18 dollars.\n"
        "The answer is 18.\n\n"
        "Question: Tom has 5 apples and buys 2 more. How many apples does he have?\n"
        "Answer: 7"
    )
    assert extract_number(text) == "18"


def test_continuation_marker_without_prior_answer_is_not_a_cut() -> None:
    text = "Question: what is 2 + 3?\nLet me think: 2 + 3 = 5.\nThe answer is 5."
    assert extract_number(text) == "5"


def test_letters_vs_numbers() -> None:
    text = "Option (B) gives 12 apples and option (C) gives 15.\nThe answer is C."
    assert extract_letter(text) == "C"
    assert extract_number(text) == "15"
    assert extract_letter("The answer is 42") is None


def test_think_block_is_skipped() -> None:
    text = "<think>maybe 7? or \\boxed{8}</think>\nThe answer is 9."
    assert extract_number(text) == "9"


# --------------------------------------------------------------------------- boxed and math


def test_boxed_nested_braces() -> None:
    assert extract_boxed("so \\boxed{\\frac{\\sqrt{3}}{2}} done") == "\\frac{\\sqrt{3}}{2}"
    assert extract_boxed("\\boxed{\\{1, 2\\}}") == "\\{1, 2\\}"
    assert extract_boxed("first \\boxed{1} then \\boxed{ {a}_{b} }") == "{a}_{b}"
    assert extract_boxed("\\boxed 5$") == "5"
    assert extract_boxed("truncated \\boxed{\\frac{1}{2") is None
    assert extract_boxed("\\fbox{7}") == "7"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("Thus the answer is $\\boxed{\\dfrac{1}{2}}$.", "\\dfrac{1}{2}"),
        ("The answer is $\\frac{\\pi}{4}$.", "\\frac{\\pi}{4}"),
        ("Answer: (3, -1)", "(3, -1)"),
        ("Final answer: x = 5", "5"),
        ("therefore 2 + 2 = 4", "4"),
    ],
)
def test_extract_math(text: str, expected: str) -> None:
    assert extract_math(text) == expected


def test_normalize_math_votes_together() -> None:
    assert (
        normalize_math("\\dfrac{1}{2}") == normalize_math("\\frac12")
        or normalize_math("\\dfrac{1}{2}") == "0.5"
    )
    assert normalize_math("\\dfrac{\\sqrt{3}}{2}") == normalize_math("\\frac{\\sqrt{3}}{2}")
    assert normalize_math("\\left( 3, -1 \\right)") == normalize_math("(3,-1)")
    assert normalize_math("90^\\circ") == "90"
    assert normalize_math("$1,000$") == "1000"


# --------------------------------------------------------------------------- letters


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("The answer is (B).", "B"),
        ("Answer: B", "B"),
        ("Answer: $C$", "C"),
        ("B) 10^-4 eV", "B"),
        ("After weighing everything, **D** is best.", "D"),
        ("the correct option is B because it conserves energy", "B"),
        ("The correct answer is: **(A)**", "A"),
        ("\\boxed{C}", "C"),
        ("\\boxed{\\text{D}}", "D"),
        ("I would go with option A.", "A"),
        ("Reasoning...\n\nC", "C"),
    ],
)
def test_extract_letter_forms(text: str, expected: str) -> None:
    assert extract_letter(text) == expected


def test_letter_ignores_articles_and_out_of_range() -> None:
    assert extract_letter("A ball is thrown. A car drives. The answer is (E).") is None
    assert extract_letter("The answer is (E).", n_choices=5) == "E"
    assert extract_letter("Answer: Approximately 5") is None


def test_letter_restated_options_do_not_win_over_the_choice() -> None:
    text = "Let's review:\nA) 10 m\nB) 20 m\nC) 30 m\nD) 40 m\nOnly (C) matches the computed distance."
    assert extract_letter(text) == "C"
    assert extract_letter("A) 10 m\nB) 20 m\nC) 30 m\nD) 40 m") is None  # a list chooses none


def test_letter_last_explicit_choice_wins() -> None:
    text = "Initially the answer is A. On reflection, the answer is D."
    assert extract_letter(text) == "D"


# --------------------------------------------------------------------------- code


def test_last_python_block_wins() -> None:
    text = (
        "First attempt:\n```python\ndef f(x):\n    return x\n```\n"
        "Output:\n```\n3\n```\nFixed:\n```python\ndef f(x):\n    return x + 1\n```\nDone."
    )
    assert extract_code(text) == "def f(x):\n    return x + 1"


def test_code_block_keeps_body_indentation_and_handles_unclosed_fence() -> None:
    assert extract_code("```python\n    return sorted(xs)\n```") == "    return sorted(xs)"
    assert extract_code("Here:\n```py\ndef g():\n    return 2\n") == "def g():\n    return 2"


def test_whole_text_is_code() -> None:
    code = "def add(a, b):\n    return a + b\n"
    assert extract_code(code) == code.strip()
    assert extract_code("    return a + b\n") == "    return a + b"
    assert extract_code("The function returns a plus b.") is None


def test_final_text() -> None:
    assert extract_final_text("...\nAnswer: Zoey is a knight, and Oliver is a knave.") == (
        "Zoey is a knight, and Oliver is a knave"
    )
    assert extract_final_text("thinking\n<answer>blue</answer>") == "blue"
    assert extract_final_text("line one\nline two\n\n") == "line two"


# --------------------------------------------------------------------------- cost bounds
# Guards against catastrophic (super-linear) regex backtracking on multi-megabyte inputs: the bound is
# CPU seconds of this process, not wall time, so a loaded machine does not fail it, and it is ~10x what a
# linear scan needs; a quadratic scan of these inputs would take hours.
CPU_BOUND_S = 10.0


def test_huge_text_is_fast() -> None:
    big = ("Let me think about 1,234 and 5/6 carefully (A) **B** \\boxed{ " * 100_000) + " The answer is 42."
    assert len(big) > 5_000_000
    start = time.process_time()
    assert extract_number(big) == "42"
    extract_letter(big)
    extract_math(big)
    extract_boxed(big)
    extract_final_text(big)
    extract_code(big)
    assert time.process_time() - start < CPU_BOUND_S


def test_pathological_digits_and_braces_are_fast() -> None:
    start = time.process_time()
    extract_number("1" * 5_000_000 + "x")
    extract_number("\\boxed{" + "9" * 19_000 + "}")
    extract_boxed("\\boxed{" + "{" * 20_000)
    extract_letter("(" * 1_000_000 + "**" * 1_000_000)
    extract_code("```" * 1_000_000)
    assert time.process_time() - start < CPU_BOUND_S


# --------------------------------------------------------------------------- recorded local-model outputs
# Real completions of the embedded llama.cpp models (greedy decoding, `puppeteer quickstart`); `expected`
# is a human reading of each text. See tests/data/README.md.

LOCAL_OUTPUTS = Path(__file__).parents[1] / "data" / "local_model_outputs.jsonl"
EXTRACTORS: dict[str, Callable[..., str | None]] = {"numeric": extract_number, "letter": extract_letter}


def _local_outputs() -> list[dict]:
    lines = LOCAL_OUTPUTS.read_text(encoding="utf-8").splitlines()
    return [json.loads(line) for line in lines if line.strip()]


def _local_output_params() -> list:
    params = []
    for i, rec in enumerate(_local_outputs()):
        gap = rec.get("extractor_gap")
        marks = [pytest.mark.xfail(strict=True, reason=gap)] if gap else []
        params.append(pytest.param(rec, id=f"{i:02d}-{rec['agent']}-{rec['kind']}", marks=marks))
    return params


@pytest.mark.parametrize("record", _local_output_params())
def test_recorded_local_model_output(record: dict) -> None:
    # as the executor does it: a completion cut off at max_tokens counts only an explicitly stated answer
    got = EXTRACTORS[record["kind"]](record["text"], committed_only=record["truncated"])
    assert got == record["expected"], record["note"]


def test_the_truncation_rule_matters_on_recorded_outputs() -> None:
    """Without it, weak fallbacks read an answer into cut-off reasoning that never gave one."""
    cut_off = [r for r in _local_outputs() if r["truncated"] and r["expected"] is None]
    misread = [r for r in cut_off if EXTRACTORS[r["kind"]](r["text"]) is not None]
    assert len(cut_off) >= 6 and len(misread) >= 3


def test_recorded_local_model_outputs_cover_the_pool() -> None:
    records = _local_outputs()
    assert 20 <= len(records) <= 30
    assert len({r["text"] for r in records}) == len(records)
    cells = {(r["agent"], r["kind"]) for r in records}
    agents = {"qwen1.5b-cot", "qwen0.5b-cot", "qwen0.5b-direct", "smollm2-direct"}
    assert cells == {(a, k) for a in agents for k in ("numeric", "letter")}
    for kind in ("numeric", "letter"):
        assert {r["expected"] is None for r in records if r["kind"] == kind} == {True, False}


# --------------------------------------------------------------------------- synthetic answer forms
# WRITTEN BY HAND, not model outputs: forms the recorded outputs above do not contain (a "### Final
# Answer" heading, a hallucinated next question, chatty text after the answer, a marker followed by a
# stray option line, competition math, code with a usage example).

SYNTH_FINAL_HEADING = r"""Let's break it down step by step.

The robe needs 2 bolts of blue fiber and half that much white fiber, which is \( \frac{2}{2} = 1 \) bolt.

Adding them gives \( 2 + 1 = 3 \) bolts.

### Final Answer
The total number of bolts is \(\boxed{3}\)."""

SYNTH_NEXT_QUESTION = """Janet has 16 eggs. She eats 3 and bakes with 4, so she has 16 - 3 - 4 = 9 eggs.
She sells them for $2 each, so she makes 9 x $2 = $18.

The answer is: 18

Question: Tom has 3 apples"""

SYNTH_RAMBLING = """To find the answer, we need to add the numbers. The numbers are 12 and 7.
12 + 7 = 19. So the answer is 19. I hope this helps! Let me know if you have any other questions."""

SYNTH_MC = """The correct answer is (B) The mitochondria. The mitochondria is the powerhouse of the cell
because it produces energy. A) is not correct because the nucleus stores DNA."""

SYNTH_MATH = r"""We need $a_3 = a_1$. From the recursion, $a_2 = \frac{1}{1-a_1}$ and
$a_3 = \frac{1}{1 - a_2} = \frac{a_1 - 1}{a_1}$.

Setting $a_3 = a_1$ gives $a_1^2 - a_1 + 1 = 0$, so the sequence has period 3 and $a_9 = a_3 = a_1$.

Then $(a_9)^9 = a_1^9 = (a_1^3)^3 = (-1)^3 = -1$.

The final answer is $\boxed{-1}$."""

SYNTH_CODE = """Here is the completed function:

```python
from typing import List


def has_close_elements(numbers: List[float], threshold: float) -> bool:
    for i, a in enumerate(numbers):
        for j, b in enumerate(numbers):
            if i != j and abs(a - b) < threshold:
                return True
    return False
```

This function compares every pair of numbers and returns `True` if any two are closer than the threshold.

Example usage:

```python
print(has_close_elements([1.0, 2.0, 3.0], 0.5))  # False
```"""


def test_synthetic_answer_forms() -> None:
    assert extract_number(SYNTH_FINAL_HEADING) == "3"
    assert extract_number(SYNTH_NEXT_QUESTION) == "18"
    assert extract_number(SYNTH_RAMBLING) == "19"
    assert extract_letter(SYNTH_MC) == "B"
    assert extract_math(SYNTH_MATH) == "-1"


def test_code_prefers_the_function_over_the_usage_example() -> None:
    code = extract_code(SYNTH_CODE)
    assert code is not None
    assert code.startswith("from typing import List")
    assert "def has_close_elements" in code and "print(" not in code


def test_code_prefers_the_block_defining_the_entry_point() -> None:
    text = (
        "```python\ndef helper(x):\n    return x\n```\n```python\ndef solve(x):\n    return 2\n```\n"
        "```python\ndef helper(x):\n    return x * 3\n```"
    )
    assert extract_code(text, entry_point="solve") == "def solve(x):\n    return 2"
    assert extract_code(text) == "def helper(x):\n    return x * 3"
