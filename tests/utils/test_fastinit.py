"""The fast constructor of the per-step records (puppeteer/utils/fastinit.py), and the per-episode tallies the
env keeps instead of recounting every step (issue 33's simulator speed): each must build exactly what
the code it replaced built."""

from __future__ import annotations

import dataclasses
import random
from dataclasses import FrozenInstanceError, dataclass, field

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from puppeteer.agents.reasoning import Turn
from puppeteer.envs.env import ConductorEnv
from puppeteer.envs.reward import discounted_return, discounted_returns
from puppeteer.tasks.signals import AnswerTally, answer_signals
from puppeteer.types import CallContext, Completion, CompletionRequest, Message, ModelSpec, Step, Trajectory
from puppeteer.utils.fastinit import fast_init

MODEL = ModelSpec("m", "sim", "m", 1.0, 0.1, 0.2)


def _original_init(cls: type) -> type:
    """``cls`` as ``@dataclass(frozen=True)`` alone would have made it (a copy without fast_init)."""
    fields = [(f.name, f.type, f) for f in dataclasses.fields(cls)]
    plain = dataclasses.make_dataclass(f"Plain{cls.__name__}", fields, frozen=True)
    return plain


CASES = [
    (Message, ("user", "hi"), {}),
    (CallContext, (), {}),
    (CallContext, ("item", "cot", 2, ("python",), ("4",)), {}),
    (CompletionRequest, (MODEL, (Message("user", "q"),)), {}),
    (CompletionRequest, (MODEL, ()), {"max_tokens": 7, "stop": ("x",), "grammar": "root ::= x"}),
    (Completion, ("t", 1, 2, 0.5, 3.0, 0.1, "m"), {}),
    (Completion, ("t", 1, 2, None, 3.0, 0.1, "m", True, True, 0.2, "Answer: 4"), {}),
    (Step, (0, 1, "a", "s", (), Completion("t", 1, 2, 0.0, 0.0, 0.0, "m"), "4"), {}),
    (Trajectory, ("id", "suite", "step", (), "4", True, 0.5), {"parse_error": "bad"}),
    (Turn, ("a", "s", "r"), {}),
]


@pytest.mark.parametrize(("cls", "args", "kwargs"), CASES, ids=lambda c: getattr(c, "__name__", ""))
def test_each_fast_record_holds_what_the_dataclass_built(cls: type, args: tuple, kwargs: dict) -> None:
    fast = cls(*args, **kwargs)
    plain = _original_init(cls)(*args, **kwargs)
    assert {f.name: getattr(fast, f.name) for f in dataclasses.fields(cls)} == {
        f.name: getattr(plain, f.name) for f in dataclasses.fields(plain)
    }
    # keywords and positions give the same record; it stays frozen, hashable where it was, replaceable
    by_name = cls(**{f.name: getattr(fast, f.name) for f in dataclasses.fields(cls)})
    assert by_name == fast and repr(by_name) == repr(fast)
    with pytest.raises(FrozenInstanceError):
        fast.__setattr__(dataclasses.fields(cls)[0].name, None)
    assert dataclasses.replace(fast) == fast


def test_default_factories_run_per_instance_and_post_init_runs() -> None:
    calls: list[int] = []

    @fast_init
    @dataclass(frozen=True)
    class Box:
        name: str
        items: list[int] = field(default_factory=list)
        scale: float = 1.0
        tag: str = field(default="t", kw_only=True)

        def __post_init__(self) -> None:
            calls.append(len(self.items))
            if self.scale < 0:
                raise ValueError("scale must be >= 0")

    a, b = Box("a"), Box("b")
    assert a.items == [] and a.items is not b.items  # a fresh list each, as the dataclass gives
    assert Box("c", [1, 2], 2.0, tag="x") == Box(name="c", items=[1, 2], scale=2.0, tag="x")
    assert calls == [0, 0, 2, 2]
    with pytest.raises(ValueError, match="scale"):
        Box("d", scale=-1.0)
    with pytest.raises(TypeError):
        Box("e", [], 1.0, "positional kw-only")  # type: ignore[misc]
    with pytest.raises(TypeError):
        Box()  # type: ignore[call-arg]


def test_fast_init_refuses_what_it_cannot_build() -> None:
    @dataclass
    class Mutable:
        x: int

    @dataclass(frozen=True, slots=True)
    class Slotted:
        x: int

    @dataclass(frozen=True)
    class Hidden:
        x: int
        y: int = field(default=0, init=False)

    for cls in (Mutable, Slotted, Hidden):
        with pytest.raises(TypeError, match="fast_init"):
            fast_init(cls)


SOME_ANSWERS = st.sampled_from(["4", "5", "4.0", "x", "-3", "1,200", " 7 "])
ANSWERS = st.lists(
    st.tuples(st.one_of(st.none(), SOME_ANSWERS), st.sampled_from([None, True, False])), max_size=8
)


@given(ANSWERS)
def test_the_tally_gives_answer_signals_at_every_prefix(steps: list[tuple[str | None, bool | None]]) -> None:
    answers, checks = [a for a, _ in steps], [c for _, c in steps]
    vectors: dict[tuple[int, ...], np.ndarray] = {}
    tally = AnswerTally(vectors)
    np.testing.assert_array_equal(tally.signals(), answer_signals([]))
    for i, (answer, check) in enumerate(steps):
        tally.add(answer, check)
        got = tally.signals()
        np.testing.assert_array_equal(got, answer_signals(answers[: i + 1], checks[: i + 1]))
        assert got.dtype == np.float32 and tally.n == i + 1
        got[:] = 9.0  # a vector handed out is the caller's: changing it changes no later one
    again = AnswerTally(vectors)
    for answer, check in steps:
        again.add(answer, check)
    np.testing.assert_array_equal(again.signals(), answer_signals(answers, checks))


@given(st.lists(st.floats(-10, 10, allow_nan=False), max_size=8), st.floats(0.0, 1.0))
def test_the_first_return_is_the_first_of_the_returns(rewards: list[float], gamma: float) -> None:
    returns = discounted_returns(rewards, gamma)
    assert discounted_return(rewards, gamma) == (returns[0] if returns else 0.0)


@pytest.mark.parametrize("pool", ["sim-paper", "sim-routing"])
def test_step_observations_count_and_signal_what_the_steps_hold(pool: str) -> None:
    """obs["counts"] and obs["signals"] are kept per episode now; recomputed from the steps they agree,
    and an observation changed by its reader changes no later one."""
    suite = "arith" if pool == "sim-paper" else "mix-routing"
    env = ConductorEnv(mode="step", pool=pool, suite=suite, max_steps=5, n_tasks=30)
    rng = random.Random(0)
    checked = 0
    for episode in range(40):
        obs, info = env.reset(seed=episode)
        done = False
        while not done:
            steps = env._steps
            counts = np.bincount([s.agent_id for s in steps], minlength=env.pool.n_actions)
            np.testing.assert_array_equal(obs["counts"], counts)
            np.testing.assert_array_equal(obs["signals"], answer_signals([s.answer for s in steps]))
            assert obs["lam"].tolist() == [env.lam]
            for key in ("counts", "signals", "lam", "mask"):
                obs[key][...] = 7  # the reader's copy
            checked += 1
            valid = np.flatnonzero(info["action_mask"])
            obs, _, done, _, info = env.step(int(rng.choice(valid.tolist())))
    assert checked > 80


@given(st.integers(-(10**16), 10**16), st.sampled_from(["numeric", "math"]))
def test_a_canonical_whole_number_is_normalized_as_the_long_way_would(n: int, kind: str) -> None:
    """normalize_answer returns a canonical whole number as it is (the simulator's distractors are
    such numbers, normalized at every new item); the long way (sign of zero, leading zeros, floats past
    1e15) agrees wherever the shortcut is taken."""
    from puppeteer.backends.sim.answers import _CANONICAL_INT, _canonical_number, normalize_answer

    text = str(n)
    got = normalize_answer(text, kind)
    assert got == _canonical_number(text)
    assert bool(_CANONICAL_INT.fullmatch(text)) == (abs(n) < 10**14 or 0 < n < 10**15)
    padded = f"-0{text[1:]}" if n < 0 else f"0{text}"
    for other in (padded, f"{text}.0", f" {text} ", f"${text}", f"\\boxed{{{text}}}"):
        assert normalize_answer(other, kind) == got  # the long way, to the same canonical number


def test_non_canonical_numbers_still_take_the_long_way() -> None:
    from puppeteer.backends.sim.answers import normalize_answer

    assert normalize_answer("-0", "numeric") == "0"
    assert normalize_answer("007", "numeric") == "7"
    assert normalize_answer("1,000", "numeric") == "1000"
    assert normalize_answer("1e3", "math") == "1000"
    assert normalize_answer("12", "letter") == "12"  # other kinds never take the shortcut
