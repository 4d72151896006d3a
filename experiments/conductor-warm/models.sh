#!/usr/bin/env bash
# Which conductor model learns more per CPU hour (issue 59 section 3): Qwen2.5-Coder-0.5B-Instruct (the
# embedded GGUF, dequantised by transformers, fully fine-tuned as the preset fine-tunes SmolLM2-135M) on the
# kept plans of the cascade conductor on `sim-local` (world.sh's search, read back: the same 200 training
# questions and plans as seeds 621-623), for a fraction of the epoch (EPOCHS) that costs about the CPU time of
# the 135M's whole epoch; then it plans the first N held-out items of world.sh's A/B (the same items and
# draws: --seed 301), where the 135M seeds' plans are paired with it (models.py).
# Seed 641 (no other page uses it). Backend: sim workers; the conductor on transformers on the CPU.
#   FINAL=cascade SEEDS="621" experiments/conductor-warm/world.sh   # first: the search and a 135M seed
#   experiments/conductor-warm/models.sh                            # ~45 minutes of one core
set -euo pipefail
cd "$(dirname "$0")/../.."
MODEL=${MODEL:-qwen2.5-coder-0.5b}
SEED=${SEED:-641}
EPOCHS=${EPOCHS:-0.24}
N=${N:-80}
SEARCH=runs/conductor-warm/sim-local-cascade/plans.jsonl
OUT=runs/conductor-warm/sim-local-cascade-$MODEL/s$SEED
RES=experiments/conductor-warm/results/sim-local-cascade-$MODEL
[ -f "$SEARCH" ] || { echo "missing $SEARCH: run FINAL=cascade SEEDS=621 experiments/conductor-warm/world.sh first" >&2; exit 1; }
mkdir -p "$RES"
[ -f "$OUT/results.json" ] || \
  OMP_NUM_THREADS=${OMP_NUM_THREADS:-1} puppeteer train track=conductor conductor=cpu-smollm2-warm \
    model.id=$MODEL pool=sim-local suite=mix-local final_answer=cascade cost_model=minutes workflow_lam=0.5 \
    seed=$SEED out=$OUT eval.before=false warm_start.plans_file=$SEARCH warm_start.draws=1 \
    warm_start.epochs=$EPOCHS grpo.max_steps=0 wandb.enabled=false
cp "$OUT/results.json" "$RES/s$SEED.json"
cp "$OUT/warm_start/sft_log.json" "$RES/s${SEED}_sft_log.json"
[ -f "$OUT/eval/results.json" ] || \
  OMP_NUM_THREADS=${OMP_NUM_THREADS:-1} puppeteer eval --policy "conductor:grpo:$OUT/warm_start" --pool sim-local \
    --suite mix-local --split test --n "$N" --seed 301 --max-steps 3 --lam 1 --out "$OUT/eval"
cp "$OUT/eval/results.json" "$RES/s${SEED}_heldout_eval.json"
