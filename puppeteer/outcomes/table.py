"""A table of logged outcomes (prompts x models: score and cost), read from a user's file and checked.

Two forms are read, from CSV, JSONL or Parquet (``.gz`` allowed for the text formats):

- **long**: one row per prompt and model, with the columns ``prompt_id`` (optional: a hash of the
  prompt then), ``prompt``, ``task`` (optional), ``split`` (optional), ``model``, ``score`` (in
  [0, 1]; 1 right, 0 wrong, a fraction for partial credit), and either ``cost_usd`` or
  ``prompt_tokens`` and ``completion_tokens`` with a price table;
- **wide**: one row per prompt, with ``prompt_id``, ``prompt``, ``task``, ``split`` as above and one
  score column per model, named by the model; ``<model>:cost_usd``, ``<model>:prompt_tokens`` and
  ``<model>:completion_tokens`` give that model's cost or tokens.

Every problem is one :class:`~puppeteer.errors.UserError` line: a missing column, a duplicate
(prompt, model), a prompt with two texts, a missing cell, a score outside [0, 1], a negative cost, a
model that the price table does not know, and a prompt whose text appears in two splits (a test
question that was trained on; ``dedupe_splits`` drops it from all but ``keep_split``). Without a
``split`` column the prompts are cut into ``train`` and ``test`` by a hash of their id; without a
``validation`` split, a tenth of ``train`` (``validation_fraction``) is hashed into one, which
``puppeteer train`` uses to choose its checkpoint.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import MappingProxyType

import numpy as np
import pandas as pd

from puppeteer.errors import UserError

LONG_COLUMNS = (
    "prompt_id",
    "prompt",
    "task",
    "split",
    "model",
    "score",
    "cost_usd",
    "prompt_tokens",
    "completion_tokens",
)
PROMPT_COLUMNS = ("prompt_id", "prompt", "task", "split")
MODEL_FIELDS = ("cost_usd", "prompt_tokens", "completion_tokens")
FORMS = ("auto", "long", "wide")


@dataclass(frozen=True)
class Price:
    """List price of one model, USD per million input and output tokens."""

    input_per_m: float
    output_per_m: float

    def cost(self, prompt_tokens: np.ndarray, completion_tokens: np.ndarray) -> np.ndarray:
        return (prompt_tokens * self.input_per_m + completion_tokens * self.output_per_m) / 1e6


@dataclass(frozen=True)
class ReadOptions:
    """How to read and check a table (the flags of ``puppeteer outcomes import``)."""

    form: str = "auto"  # long | wide | auto (long when a ``model`` column exists)
    prices: Mapping[str, Price] = field(default_factory=lambda: MappingProxyType({}))
    dedupe_splits: bool = False  # drop a prompt found in two splits from all but ``keep_split``
    keep_split: str = "test"
    drop_incomplete: bool = False  # drop prompts that lack a score for some model
    test_fraction: float = 0.2  # without a split column: the share of prompts hashed into ``test``
    # without a ``validation`` split: the share of ``train`` hashed into one (for `puppeteer train`'s
    # checkpoint choice); 0: none
    validation_fraction: float = 0.1
    seed: int = 0


@dataclass(frozen=True, eq=False)
class LoggedTable:
    """Prompts x models: ``score`` in [0, 1] and ``cost`` in USD, with each prompt's text, task and split."""

    prompt_ids: tuple[str, ...]
    prompts: tuple[str, ...]
    tasks: tuple[str, ...]  # "" where the table has no task label
    splits: tuple[str, ...]
    models: tuple[str, ...]
    score: np.ndarray  # (prompts, models)
    cost: np.ndarray  # (prompts, models), USD
    prompt_tokens: np.ndarray  # (prompts, models); 0 where not logged
    completion_tokens: np.ndarray

    def __len__(self) -> int:
        return len(self.prompt_ids)

    @property
    def split_names(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(self.splits))

    def rows(self, mask: np.ndarray) -> LoggedTable:
        """The table on the prompts where ``mask`` is true."""
        idx = np.flatnonzero(mask)
        pick = lambda xs: tuple(xs[i] for i in idx)  # noqa: E731
        return LoggedTable(
            pick(self.prompt_ids),
            pick(self.prompts),
            pick(self.tasks),
            pick(self.splits),
            self.models,
            self.score[idx],
            self.cost[idx],
            self.prompt_tokens[idx],
            self.completion_tokens[idx],
        )

    def split(self, name: str) -> LoggedTable:
        if name not in self.splits:
            raise UserError(f"the table has no split {name!r}; splits: {', '.join(self.split_names)}")
        return self.rows(np.array([s == name for s in self.splits]))

    def long_frame(self) -> pd.DataFrame:
        """The table in the long form (one row per prompt and model), sorted by prompt then model."""
        n, m = self.score.shape
        frame = pd.DataFrame(
            {
                "prompt_id": np.repeat(self.prompt_ids, m),
                "prompt": np.repeat(self.prompts, m),
                "task": np.repeat(self.tasks, m),
                "split": np.repeat(self.splits, m),
                "model": np.tile(self.models, n),
                "score": self.score.ravel(),
                "cost_usd": self.cost.ravel(),
                "prompt_tokens": self.prompt_tokens.ravel(),
                "completion_tokens": self.completion_tokens.ravel(),
            }
        )
        return frame.sort_values(["prompt_id", "model"], kind="stable").reset_index(drop=True)


# --------------------------------------------------------------------------- files


def read_frame(path: str | Path) -> pd.DataFrame:
    """A CSV, JSONL or Parquet file (``.gz`` for the text formats) as a frame of strings and numbers."""
    p = Path(path)
    if not p.is_file():
        raise UserError(f"{p}: no such file")
    name = p.name.lower()
    kind = Path(name.removesuffix(".gz")).suffix
    try:
        if kind == ".csv":
            return pd.read_csv(
                p, dtype={"prompt_id": str, "split": str, "task": str}, keep_default_na=False, na_values=[""]
            )
        if kind in {".jsonl", ".ndjson"}:
            return pd.read_json(p, lines=True, dtype={"prompt_id": str})
        if kind == ".parquet":
            return pd.read_parquet(p)
    except (ValueError, OSError, pd.errors.ParserError) as e:
        raise UserError(f"{p}: cannot be read ({type(e).__name__}: {str(e).splitlines()[0]})") from None
    raise UserError(
        f"{p}: unknown format {kind or '(no suffix)'!r}; give .csv, .jsonl or .parquet (.gz allowed)"
    )


def read_prices(path: str | Path) -> dict[str, Price]:
    """A price table: YAML or JSON ``{model: {input: USD per 1M tokens, output: USD per 1M tokens}}``."""
    import yaml

    p = Path(path)
    try:
        raw = yaml.safe_load(p.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as e:
        raise UserError(f"{p}: not a readable price table ({type(e).__name__})") from None
    if not isinstance(raw, Mapping):
        raise UserError(
            f"{p}: a price table maps each model to {{input: ..., output: ...}} (USD per 1M tokens)"
        )
    prices = {}
    for model, entry in raw.items():
        try:
            prices[str(model)] = Price(float(entry["input"]), float(entry["output"]))
        except (KeyError, TypeError, ValueError):
            raise UserError(
                f"{p}: model {model!r} needs numeric 'input' and 'output' prices (USD per 1M tokens)"
            ) from None
        if min(prices[str(model)].input_per_m, prices[str(model)].output_per_m) < 0:
            raise UserError(f"{p}: model {model!r} has a negative price")
    return prices


# --------------------------------------------------------------------------- forms


def _detect_form(frame: pd.DataFrame, form: str) -> str:
    if form not in FORMS:
        raise UserError(f"unknown form {form!r}; known: {', '.join(FORMS)}")
    if form != "auto":
        return form
    return "long" if "model" in frame.columns else "wide"


def wide_to_long(frame: pd.DataFrame) -> pd.DataFrame:
    """One row per prompt and model from one row per prompt (see the module docstring for the columns)."""
    per_model: dict[str, dict[str, str]] = {}
    for col in frame.columns:
        name = str(col)
        if name in PROMPT_COLUMNS:
            continue
        model, _, what = name.rpartition(":")
        if model and what in MODEL_FIELDS:
            per_model.setdefault(model, {})[what] = name
        else:
            per_model.setdefault(name, {})["score"] = name
    orphans = sorted(m for m, cols in per_model.items() if "score" not in cols)
    if orphans:
        raise UserError(f"wide table: cost or token columns for {orphans} but no score column of that name")
    if not per_model:
        raise UserError(
            "wide table: no model score columns "
            "(every column other than prompt_id, prompt, task, split is a model)"
        )
    keep = [c for c in PROMPT_COLUMNS if c in frame.columns]
    parts = []
    for model, cols in per_model.items():
        part = frame[keep].copy()
        part["model"] = model
        for what, col in cols.items():
            part[what] = frame[col].to_numpy()
        parts.append(part)
    return pd.concat(parts, ignore_index=True)


def _text_key(text: str) -> str:
    return re.sub(r"\s+", " ", text).strip()


def _hash_id(text: str) -> str:
    return hashlib.sha256(_text_key(text).encode("utf-8")).hexdigest()[:16]


def _first(values: Sequence[object], n: int = 3) -> str:
    shown = [repr(str(v)[:60]) for v in list(values)[:n]]
    return ", ".join(shown) + (", ..." if len(values) > n else "")


# --------------------------------------------------------------------------- checks


def _prompt_columns(long: pd.DataFrame, opts: ReadOptions) -> pd.DataFrame:
    if "prompt" not in long.columns:
        raise UserError("the table needs a 'prompt' column (the text a router reads)")
    if "model" not in long.columns or "score" not in long.columns:
        raise UserError("a long table needs 'model' and 'score' columns (or give the wide form)")
    long = long.copy()
    if long["prompt"].isna().any():
        raise UserError(f"{int(long['prompt'].isna().sum())} rows have no prompt text")
    long["prompt"] = long["prompt"].astype(str)
    if "prompt_id" not in long.columns:
        long["prompt_id"] = long["prompt"].map(_hash_id)
    if long["prompt_id"].isna().any():
        raise UserError(f"{int(long['prompt_id'].isna().sum())} rows have no prompt_id")
    long["prompt_id"] = long["prompt_id"].astype(str)
    long["model"] = long["model"].astype(str)
    for col in ("task", "split"):
        long[col] = long[col].fillna("").astype(str) if col in long.columns else ""
    return long


def _check_scores(long: pd.DataFrame, opts: ReadOptions) -> pd.DataFrame:
    score = pd.to_numeric(long["score"], errors="coerce")
    bad_text = score.isna() & long["score"].notna()
    if bad_text.any():
        raise UserError(
            f"{int(bad_text.sum())} scores are not numbers "
            f"(first: {_first(long['score'][bad_text].tolist())})"
        )
    long = long.assign(score=score)
    missing = long["score"].isna()
    if missing.any():
        ids = sorted(set(long["prompt_id"][missing]))
        if not opts.drop_incomplete:
            raise UserError(
                f"{missing.sum()} missing scores on {len(ids)} prompts (first: {_first(ids)}); "
                "give --drop-incomplete to drop those prompts"
            )
        long = long[~long["prompt_id"].isin(ids)]
    out = (long["score"] < 0) | (long["score"] > 1)
    if out.any():
        row = long[out].iloc[0]
        raise UserError(
            f"{int(out.sum())} scores outside [0, 1] (first: {row['score']} for prompt {row['prompt_id']!r}, "
            f"model {row['model']!r}); rescale them to [0, 1]"
        )
    return long


def _check_keys(long: pd.DataFrame, opts: ReadOptions) -> pd.DataFrame:
    dup = long.duplicated(["prompt_id", "model"], keep=False)
    if dup.any():
        first = long[dup].iloc[0]
        raise UserError(
            f"{int(dup.sum())} rows repeat a (prompt_id, model) pair (first: {first['prompt_id']!r}, "
            f"{first['model']!r}); keep one row per prompt and model"
        )
    for col in ("prompt", "task", "split"):
        counts = long.groupby("prompt_id")[col].nunique()
        if (counts > 1).any():
            ids = counts.index[counts > 1].tolist()
            raise UserError(f"{len(ids)} prompt ids have more than one {col} (first: {_first(ids)})")
    models = sorted(set(long["model"]))
    have = long.groupby("prompt_id")["model"].nunique()
    short = have.index[have < len(models)].tolist()
    if short:
        if not opts.drop_incomplete:
            raise UserError(
                f"{len(short)} prompts lack a row for some of the {len(models)} models "
                f"(first: {_first(short)}); "
                "give --drop-incomplete to drop those prompts"
            )
        long = long[~long["prompt_id"].isin(short)]
    if long.empty:
        raise UserError("no prompt is left with a score for every model")
    return long


def _costs(long: pd.DataFrame, opts: ReadOptions) -> pd.DataFrame:
    long = long.copy()
    for col in ("prompt_tokens", "completion_tokens"):
        if col in long.columns:
            tokens = pd.to_numeric(long[col], errors="coerce")
            if tokens.isna().any() or (tokens < 0).any():
                raise UserError(
                    f"column {col!r}: {int((tokens.isna() | (tokens < 0)).sum())} cells are "
                    "missing or negative"
                )
            long[col] = tokens.astype(int)
        else:
            long[col] = 0
    has_tokens = {"prompt_tokens", "completion_tokens"} & set(long.columns) and (
        long["prompt_tokens"].sum() + long["completion_tokens"].sum() > 0
    )
    if "cost_usd" in long.columns and not opts.prices:
        cost = pd.to_numeric(long["cost_usd"], errors="coerce")
        if cost.isna().any():
            ids = sorted(set(long["prompt_id"][cost.isna()]))
            raise UserError(
                f"{int(cost.isna().sum())} missing costs on {len(ids)} prompts (first: {_first(ids)})"
            )
        if (cost < 0).any():
            raise UserError(f"{int((cost < 0).sum())} negative costs")
        return long.assign(cost_usd=cost.astype(float))
    if not opts.prices:
        raise UserError(
            "the table has no cost: give a 'cost_usd' column, or 'prompt_tokens' and 'completion_tokens' "
            "with --prices PRICES.yaml"
        )
    if not has_tokens:
        raise UserError("--prices needs 'prompt_tokens' and 'completion_tokens' columns to price")
    unknown = sorted(set(long["model"]) - set(opts.prices))
    if unknown:
        raise UserError(f"the price table has no price for models {unknown}; known: {sorted(opts.prices)}")
    cost = np.zeros(len(long))
    models = long["model"].to_numpy()
    for model, price in opts.prices.items():
        rows = models == model
        cost[rows] = price.cost(
            long["prompt_tokens"].to_numpy()[rows], long["completion_tokens"].to_numpy()[rows]
        )
    return long.assign(cost_usd=cost)


def _hash_split(prompt_id: str, opts: ReadOptions) -> str:
    h = int.from_bytes(hashlib.sha256(f"{opts.seed}\x1f{prompt_id}".encode()).digest()[:8], "big")
    return "test" if h / 2**64 < opts.test_fraction else "train"


def _validation(long: pd.DataFrame, opts: ReadOptions) -> pd.DataFrame:
    """A ``validation`` share hashed out of ``train`` where the table has none."""
    if not opts.validation_fraction or (long["split"] == "validation").any():
        return long
    if not 0.0 < opts.validation_fraction < 1.0:
        raise UserError(f"validation fraction must be in [0, 1), got {opts.validation_fraction}")
    frac = replace(opts, test_fraction=opts.validation_fraction, seed=opts.seed + 1)
    moved = (long["split"] == "train") & (long["prompt_id"].map(lambda p: _hash_split(p, frac)) == "test")
    return long.assign(split=long["split"].where(~moved, "validation"))


def _splits(long: pd.DataFrame, opts: ReadOptions) -> pd.DataFrame:
    return _validation(_given_splits(long, opts), opts)


def _given_splits(long: pd.DataFrame, opts: ReadOptions) -> pd.DataFrame:
    if not (long["split"] != "").any():
        if not 0.0 < opts.test_fraction < 1.0:
            raise UserError(f"test fraction must be in (0, 1), got {opts.test_fraction}")
        return long.assign(split=long["prompt_id"].map(lambda p: _hash_split(p, opts)))
    if (long["split"] == "").any():
        ids = sorted(set(long["prompt_id"][long["split"] == ""]))
        raise UserError(f"{len(ids)} prompts have no split while others do (first: {_first(ids)})")
    key = long["prompt"].map(_text_key)
    per_text = long.assign(key=key).groupby("key")["split"].nunique()
    leaked = set(per_text.index[per_text > 1])
    if not leaked:
        return long
    in_keep = set(key[(long["split"] == opts.keep_split)])
    if not opts.dedupe_splits:
        example = next(iter(sorted(leaked)))
        where = sorted(set(long["split"][key == example]))
        raise UserError(
            f"{len(leaked)} prompts appear in more than one split "
            f"(first: {example[:60]!r} in {', '.join(where)}); "
            f"give --dedupe-splits to drop them from every split but {opts.keep_split!r}"
        )
    nowhere = leaked - in_keep
    if nowhere:
        raise UserError(
            f"--dedupe-splits keeps a shared prompt in {opts.keep_split!r}, "
            f"but {len(nowhere)} of them are not "
            f"in it (first: {next(iter(sorted(nowhere)))[:60]!r}); name the split to keep with --keep-split"
        )
    return long[~(key.isin(leaked) & (long["split"] != opts.keep_split))]


# --------------------------------------------------------------------------- entry


def table_from_long(long: pd.DataFrame) -> LoggedTable:
    """A :class:`LoggedTable` from a checked long frame (prompts in first-seen order, models sorted)."""
    models = tuple(sorted(set(long["model"])))
    prompts = long.drop_duplicates("prompt_id")[["prompt_id", "prompt", "task", "split"]]
    order = {p: i for i, p in enumerate(prompts["prompt_id"])}
    col = {m: j for j, m in enumerate(models)}
    n, m = len(order), len(models)
    rows = long["prompt_id"].map(order).to_numpy()
    cols = long["model"].map(col).to_numpy()

    def grid(name: str, dtype: type) -> np.ndarray:
        out = np.zeros((n, m), dtype=dtype)
        out[rows, cols] = long[name].to_numpy(dtype=dtype)
        return out

    return LoggedTable(
        prompt_ids=tuple(prompts["prompt_id"]),
        prompts=tuple(prompts["prompt"]),
        tasks=tuple(prompts["task"]),
        splits=tuple(prompts["split"]),
        models=models,
        score=grid("score", float),
        cost=grid("cost_usd", float),
        prompt_tokens=grid("prompt_tokens", np.int64),
        completion_tokens=grid("completion_tokens", np.int64),
    )


def check_long(long: pd.DataFrame, opts: ReadOptions = ReadOptions()) -> LoggedTable:
    """Check a long frame (see the module docstring) and return its table; a :class:`UserError` for the
    first problem found."""
    long = _prompt_columns(long, opts)
    long = _check_scores(long, opts)
    long = _check_keys(long, opts)
    long = _costs(long, opts)
    long = _splits(long, opts)
    return table_from_long(long)


def read_logged(paths: Sequence[str | Path], opts: ReadOptions = ReadOptions()) -> LoggedTable:
    """Read one or more files of one form (concatenated) and check them into a :class:`LoggedTable`."""
    if not paths:
        raise UserError("give at least one table file")
    frames = [read_frame(p) for p in paths]
    frame = pd.concat(frames, ignore_index=True) if len(frames) > 1 else frames[0]
    form = _detect_form(frame, opts.form)
    return check_long(frame if form == "long" else wide_to_long(frame), opts)
