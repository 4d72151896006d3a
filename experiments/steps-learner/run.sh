#!/usr/bin/env bash
# The quickstart's learner (a one-call router, then the decision after its call, reading the answer
# signals) on the replayed real table WITH second steps: local-mix-steps, the eight solvers plus the
# 0.5B verifier, whose calls the table holds after each kind's first agent on all 520 items
# (experiments/second-steps). The pool offers only recorded calls (recorded_only), so every call replays
# and the run needs no model (strict replay). Five seeds no other page uses, against the best rule and
# the best single agent chosen on the same 200 training items. Backend: llama.cpp, replayed.
#   experiments/steps-learner/run.sh 1   # lambda 1 per model minute (the quickstart's price); ~1 h on one core
set -euo pipefail
cd "$(dirname "$0")/../.."
LAM=${1:-1}
OUT=runs/qs-steps/lam$LAM
RES=experiments/steps-learner/results/lam$LAM
AGENTS=qwen1.5b-cot,qwen1.5b-pot,qwen1.5b-direct,qwen1.5b-code,qwen0.5b-pot,qwen0.5b-direct,qwen0.5b-calc,qwen0.5b-code
mkdir -p "$RES/seed311"
puppeteer quickstart --pool local-mix-steps --agents "$AGENTS,qwen0.5b-verify" \
  --baselines single:qwen1.5b-pot,single:qwen1.5b-cot,single:qwen0.5b-code,single:qwen0.5b-direct \
  --lam "$LAM" --seed 311 --seeds 5 --replay strict --out "$OUT"
cp "$OUT/report.md" "$OUT/results.json" "$RES/"
cp "$OUT"/*.png "$RES/"
cp "$OUT"/seed311/*.png "$RES/seed311/"  # the learning curves the report shows
python experiments/steps-learner/usage.py "$OUT" --out "$RES/usage.json"
