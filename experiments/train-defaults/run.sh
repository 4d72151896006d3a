#!/usr/bin/env bash
# `puppeteer train` with no learner flag on the simulated routing world, three seeds no other page uses,
# then every trained router against the most accurate single agent and the best rule on the same
# held-out items (backend: sim). Scratch runs go to runs/train-defaults/; the small artefacts to results/.
set -euo pipefail
cd "$(dirname "$0")/../.."
OUT=runs/train-defaults
RES=experiments/train-defaults/results
mkdir -p "$RES"
for seed in 21 22 23; do
  [ -f "$OUT/seed$seed/results.json" ] || \
    puppeteer train pool=sim-routing suite=mix-routing lam=0.1 seed=$seed out=$OUT/seed$seed progress=false wandb.enabled=false
  cp "$OUT/seed$seed/results.json" "$RES/seed$seed.json"
done
puppeteer ab single:sonnet35-cot ${RULE:-best-rule} puppeteer:$OUT/seed21/best puppeteer:$OUT/seed22/best puppeteer:$OUT/seed23/best \
  --pool sim-routing --suite mix-routing --n 400 --lam 0.1 --out $OUT/ab
cp $OUT/ab/arms.md $OUT/ab/arms.json $OUT/ab/arms.png "$RES/"
