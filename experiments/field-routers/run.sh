#!/usr/bin/env bash
# The field's routers and the learned router on the two shipped public tables (experiments/field-routers/README.md).
# ~15 min for llmrouter-dc (5 seeds; the MiniLM embedding of 5,989 prompts once, then ~2 min a seed) and
# ~4 min for routellm GSM8K on 2 cores. Results land in runs/field-routers/; the page's copies are in results/.
set -euo pipefail
export OMP_NUM_THREADS=1 HF_HUB_OFFLINE=1 LITELLM_OFFLINE_MODE=true WANDB_MODE=offline
here=experiments/field-routers
out=runs/field-routers

python $here/convert.py llmrouter-dc $out/llmrouter-dc
# the 119 test questions that are also in the train file are dropped from train; the whole train file
# is the training split (no validation share carved out: the benchmark chooses on train only)
puppeteer outcomes import $out/llmrouter-dc/table.csv.gz --prices $out/llmrouter-dc/prices.yaml \
  --out $out/llmrouter-dc-imported --dedupe-splits --validation-fraction 0 --force
puppeteer -v outcomes routers $out/llmrouter-dc-imported --out $out/bench-llmrouter-dc --seeds 0,1,2,3,4

python $here/convert.py routellm-gsm8k $out/routellm-gsm8k
puppeteer outcomes import $out/routellm-gsm8k/table.csv.gz --prices $out/routellm-gsm8k/prices.yaml \
  --out $out/routellm-gsm8k-imported --validation-fraction 0 --force
puppeteer -v outcomes routers $out/routellm-gsm8k-imported --out $out/bench-routellm-gsm8k --seeds 0,1,2,3,4
