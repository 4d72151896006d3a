#!/usr/bin/env bash
# The quickstart's learner with backward induction (--first-again-episodes) on the replayed real table with
# second steps: the one-call router; then the decision after *every* first call, the router fixed (every
# pair of actions tried on each item); then the first call again, that decision fixed, on what each first
# call is worth when the decision after it acts. Same pool, items, price and references as run.sh; fresh
# seeds from 321 (no other page uses them). Backend: llama.cpp, replayed (strict: no model loads). Every pair
# of actions on an item is 80 episodes here (8 first calls x 10), so the stages' episodes buy fewer items
# than run.sh's (10 an item after the router's call).
#   SEEDS=2 experiments/steps-learner/backward.sh 1   # lambda 1 per model minute; ~25 min a seed on one core
set -euo pipefail
cd "$(dirname "$0")/../.."
LAM=${1:-1}
SEEDS=${SEEDS:-5}
OUT=runs/qs-steps-backward/lam$LAM
RES=experiments/steps-learner/results/backward_lam$LAM
AGENTS=qwen1.5b-cot,qwen1.5b-pot,qwen1.5b-direct,qwen1.5b-code,qwen0.5b-pot,qwen0.5b-direct,qwen0.5b-calc,qwen0.5b-code
mkdir -p "$RES/seed321"
puppeteer quickstart --pool local-mix-steps --agents "$AGENTS,qwen0.5b-verify" \
  --baselines single:qwen1.5b-pot,single:qwen1.5b-cot,single:qwen0.5b-code,single:qwen0.5b-direct \
  --lam "$LAM" --seed 321 --seeds "$SEEDS" --after-call-episodes 65536 --first-again-episodes 32768 \
  --replay strict --out "$OUT"
cp "$OUT/report.md" "$OUT/results.json" "$RES/"
cp "$OUT"/*.png "$RES/"
cp "$OUT"/seed321/*.png "$RES/seed321/"  # the learning curves the report shows
python experiments/steps-learner/usage.py "$OUT" --out "$RES/usage.json"
