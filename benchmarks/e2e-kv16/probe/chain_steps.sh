#!/bin/bash
# The default chain's second steps on 16 GSM8K items, batched, with every decode step logged
# (step_log.py). Its first steps (single:qwen1.5b-cot) come from the response cache that
# two_policies.sh's batched arm wrote, so only the second steps (a verifier reading ~450 tokens) run.
# Writes OUT/chain/steps.jsonl: [time, model, sequences, tokens, seconds] per decode. Run from the repo root.
set -eu
OUT=${OUT:-runs/e2e-kv16-probe}
export HF_HUB_OFFLINE=1 LITELLM_OFFLINE_MODE=true WANDB_MODE=offline
d=$OUT/chain; rm -rf "$d"; mkdir -p "$d"; cp "$OUT/p-j1/r.sqlite" "$d/r.sqlite"
STEP_LOG=$d/steps.jsonl python benchmarks/e2e-kv16/probe/step_log.py experiments/baselines-local/baselines_table.py \
  --pool local --suites gsm8k --n 16 --specs chain --cache "$d/r.sqlite" --runs-dir "$d/runs" \
  --out "$d/table.md" --no-plot --quiet > "$d/log" 2>&1
