"""What the text of a query can predict about which model answers it (llmrouter-dc, held-out split).

    python experiments/field-routers/predictability.py runs/field-routers/llmrouter-dc-imported \
        runs/field-routers/bench-llmrouter-dc/cache \
        experiments/field-routers/results/llmrouter-dc/predictability.md

Reads the imported table and the MiniLM embeddings that `puppeteer outcomes routers` cached, fits the
per-model logistic predictor on train (as the `logistic` router does) and reports, on test: each
model's ROC AUC for "this model is fully right on this query", overall and within task (the mean over
tasks of the AUC among that task's queries: what the text adds once the task is known); and the
quality of three ceilings: the best single model, the best model per task chosen on the test split
itself (a task-only router that cannot be beaten by knowing the task better), and the per-query oracle.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
from sklearn.metrics import roc_auc_score

from puppeteer.analytics.field_routers import RouterData, _logistic_quality
from puppeteer.outcomes.store import load_logged


def main(folder: str, cache: str, out: str) -> None:
    table = load_logged(folder)
    x = np.load(next(Path(cache).glob("embed-minilm-*.npy")))
    splits = np.array(table.splits)
    tr, te = table.split("train"), table.split("test")
    train = RouterData(x[splits == "train"], tr.tasks, tr.score, tr.cost)
    test = RouterData(x[splits == "test"], te.tasks, te.score, te.cost)
    q = _logistic_quality(train, test)
    right = te.score >= 1.0
    tasks = np.array(te.tasks)
    lines = [
        "| model | test accuracy | AUC (all test queries) | AUC within task (mean over tasks) |",
        "|---|---:|---:|---:|",
    ]
    within_all = []
    for j, m in enumerate(te.models):
        overall = roc_auc_score(right[:, j], q[:, j]) if 0 < right[:, j].mean() < 1 else float("nan")
        within = [
            roc_auc_score(right[tasks == t, j], q[tasks == t, j])
            for t in sorted(set(te.tasks))
            if 0 < right[tasks == t, j].mean() < 1
        ]
        within_all += within
        lines.append(f"| `{m}` | {right[:, j].mean():.3f} | {overall:.3f} | {np.mean(within):.3f} |")
    best_single = te.score.mean(axis=0).max()
    task_oracle = sum(
        te.score[tasks == t].mean(axis=0).max() * (tasks == t).sum() for t in set(te.tasks)
    ) / len(te)
    oracle = te.score.max(axis=1).mean()
    lines += [
        "",
        f"Mean within-task AUC over models and tasks: {np.mean(within_all):.3f} (0.5: the text says nothing "
        "beyond the task).",
        "",
        "| ceiling (mean score on test) | quality |",
        "|---|---:|",
        f"| best single model (chosen on test) | {best_single:.3f} |",
        f"| best model per task (chosen on test: the most any task-only router gets) | {task_oracle:.3f} |",
        f"| per-query oracle | {oracle:.3f} |",
    ]
    Path(out).parent.mkdir(parents=True, exist_ok=True)
    Path(out).write_text("\n".join(lines) + "\n", encoding="utf-8")
    print("\n".join(lines))


if __name__ == "__main__":
    main(*sys.argv[1:4])
