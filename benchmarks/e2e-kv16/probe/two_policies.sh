#!/bin/bash
# Two chain-of-thought policies on two models (16 GSM8K test items, fresh response cache each):
# batched one after another (j1), batched at once (j2, --jobs 2), one call at a time (one).
# Writes OUT/p-<arm>/table.md and one line per arm to OUT/two_policies.txt. Run from the repo root.
set -eu
OUT=${OUT:-runs/e2e-kv16-probe}
export HF_HUB_OFFLINE=1 LITELLM_OFFLINE_MODE=true WANDB_MODE=offline
for arm in j1 j2 one; do
  d=$OUT/p-$arm; rm -rf "$d"; mkdir -p "$d"
  extra=""; [ $arm = j2 ] && extra="--jobs 2"; [ $arm = one ] && extra="--no-batching"
  s=$(date +%s.%N)
  python experiments/baselines-local/baselines_table.py --pool local --suites gsm8k --n 16 \
    --specs single:qwen1.5b-cot single:qwen0.5b-cot --cache "$d/r.sqlite" --runs-dir "$d/runs" \
    --out "$d/table.md" --no-plot --quiet $extra > "$d/log" 2>&1
  e=$(date +%s.%N)
  echo "$arm wall=$(echo "$e - $s" | bc) load=$(cut -d' ' -f1 /proc/loadavg)" >> "$OUT/two_policies.txt"
done
