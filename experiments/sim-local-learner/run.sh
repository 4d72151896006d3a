#!/usr/bin/env bash
# The quickstart's learner (a one-call router, then the decision after its call, reading the answer
# signals) on the simulator calibrated on the real local-mix table, five seeds no other page uses,
# against the best rule and the best single agent chosen on the same 200 training items. Backend: sim.
#   experiments/sim-local-learner/run.sh 1   # lambda 1 per model minute (the quickstart's price)
#   experiments/sim-local-learner/run.sh 0   # lambda 0: accuracy alone, where the world leaves room
set -euo pipefail
cd "$(dirname "$0")/../.."
LAM=${1:-1}
OUT=runs/sim-local-learner/lam$LAM
RES=experiments/sim-local-learner/results/lam$LAM
mkdir -p "$RES/seed301"
puppeteer quickstart --pool sim-local --lam "$LAM" --seed 301 --seeds 5 --out "$OUT"
cp "$OUT/report.md" "$OUT/results.json" "$RES/"
cp "$OUT"/*.png "$RES/"
cp "$OUT"/seed301/*.png "$RES/seed301/"  # the learning curves the report shows
