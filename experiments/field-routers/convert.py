"""Convert the two shipped public outcome tables into the general long form of `puppeteer outcomes import`.

    python experiments/field-routers/convert.py llmrouter-dc runs/field-routers/llmrouter-dc
    python experiments/field-routers/convert.py routellm-gsm8k runs/field-routers/routellm-gsm8k

Each writes `<out>/table.csv.gz` (one row per prompt and model: prompt_id, prompt, task, split, model,
score, prompt_tokens, completion_tokens) and `<out>/prices.yaml` (USD per 1M input / output tokens);
then `puppeteer outcomes import <out>/table.csv.gz --prices <out>/prices.yaml --out ...` checks and
imports it. Nothing here is special-cased in the library: these are examples of the general form.

Neither table logs tokens per query, so both are priced on an estimate stated here: prompt tokens =
ceil(characters / 4) of the prompt; completion tokens = ceil(characters / 4) of the logged response
where there is one (routellm GSM8K), else a flat 256 per call (llmrouter-dc). Only the models' price
ratios and the prompt lengths move cost; read cost figures as list-price estimates.
"""

from __future__ import annotations

import argparse
import gzip
import json
import math
from pathlib import Path

import pandas as pd
import yaml

DATA = Path(__file__).resolve().parent / "data"
FLAT_COMPLETION_TOKENS = 256


def tokens(text: str) -> int:
    return max(1, math.ceil(len(text) / 4))


def llmrouter_dc() -> tuple[pd.DataFrame, dict[str, dict[str, float]]]:
    """The 5,608 train and 500 test queries, 9 models; the task label joined from the query files on
    the text (each split's own file first). The 119 test questions that are also in train stay in both
    here: `outcomes import` refuses them unless --dedupe-splits drops them from train."""
    root = DATA / "llmrouter-dc"
    meta: dict[str, dict[str, str]] = {}
    for split in ("train", "test"):
        with gzip.open(root / f"example_data__query_data__default_query_{split}.jsonl.gz", "rt") as fh:
            rows = [json.loads(line) for line in fh if line.strip()]
        meta[split] = {}
        for r in rows:
            meta[split].setdefault(r["query"], r["task_name"])
    out = []
    for split in ("train", "test"):
        with gzip.open(root / f"dcrouter_preprocessed__{split}.json.gz", "rt") as fh:
            items = json.load(fh)
        other = "test" if split == "train" else "train"
        for i, item in enumerate(items):
            q = item["question"]
            task = meta[split].get(q) or meta[other][q]
            for model, score in item["scores"].items():
                out.append(
                    {
                        "prompt_id": f"{split}-{i:05d}",
                        "prompt": q,
                        "task": task,
                        "split": split,
                        "model": model,
                        "score": float(score),
                        "prompt_tokens": tokens(q),
                        "completion_tokens": FLAT_COMPLETION_TOKENS,
                    }
                )
    with gzip.open(root / "example_data__llm_candidates__default_llm.json.gz", "rt") as fh:
        cands = json.load(fh)
    models = {r["model"] for r in out}
    prices = {
        m: {"input": float(c["input_price"]), "output": float(c["output_price"])}
        for m, c in cands.items()
        if m in models
    }
    return pd.DataFrame(out), prices


# List prices (USD per 1M tokens) as stated here, not shipped with the data: GPT-4 Turbo
# (gpt-4-1106-preview) $10 / $30 (OpenAI's price list); Mixtral-8x7B-Instruct $0.60 / $0.60 (a typical
# hosted price in 2024). Check them before citing cost figures.
ROUTELLM_PRICES = {
    "gpt-4-1106-preview": {"input": 10.0, "output": 30.0},
    "mistralai/Mixtral-8x7B-Instruct-v0.1": {"input": 0.6, "output": 0.6},
}


def routellm_gsm8k() -> tuple[pd.DataFrame, dict[str, dict[str, float]]]:
    """RouteLLM's GSM8K evaluations: 1,319 prompts, two models; no splits (import hashes a test fifth)."""
    frame = pd.read_csv(DATA / "routellm-evals" / "gsm8k_responses.csv.gz", keep_default_na=False)
    out = []
    for i, row in frame.iterrows():
        for model in ROUTELLM_PRICES:
            right = str(row[model]).strip().lower() == "true"
            out.append(
                {
                    "prompt_id": f"gsm8k-{i:04d}",
                    "prompt": row["prompt"],
                    "task": "gsm8k",
                    "model": model,
                    "score": 1.0 if right else 0.0,
                    "prompt_tokens": tokens(row["prompt"]),
                    "completion_tokens": tokens(str(row[f"{model}_response"])),
                }
            )
    return pd.DataFrame(out), ROUTELLM_PRICES


CONVERTERS = {"llmrouter-dc": llmrouter_dc, "routellm-gsm8k": routellm_gsm8k}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("table", choices=sorted(CONVERTERS))
    parser.add_argument("out", type=Path)
    args = parser.parse_args()
    frame, prices = CONVERTERS[args.table]()
    args.out.mkdir(parents=True, exist_ok=True)
    frame.to_csv(args.out / "table.csv.gz", index=False)
    (args.out / "prices.yaml").write_text(yaml.safe_dump(prices, sort_keys=True), encoding="utf-8")
    print(
        f"{args.out / 'table.csv.gz'}: {frame['prompt_id'].nunique()} prompts "
        f"x {frame['model'].nunique()} models"
    )


if __name__ == "__main__":
    main()
