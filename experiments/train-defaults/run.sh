#!/usr/bin/env bash
# `puppeteer train` with no learner flag on the simulated routing world, three seeds no other page uses,
# then the trained routers against the most accurate single agent, the best rule and the best single
# agent (chosen on training items at lambda 0.1 in cents) on the same 400 held-out items. Backend: sim.
#   experiments/train-defaults/run.sh independent-repeats   # the pool file as shipped (repeat_corr 0)
#   experiments/train-defaults/run.sh greedy-repeats        # a repeated greedy call answers as before
set -euo pipefail
cd "$(dirname "$0")/../.."
VARIANT=${1:-greedy-repeats}
OUT=runs/train-defaults/$VARIANT
RES=experiments/train-defaults/results/$VARIANT
mkdir -p "$OUT" "$RES"
POOL=agents/sim-routing.yaml
EXTRA=()
if [ "$VARIANT" = greedy-repeats ]; then
  POOL=$OUT/sim-routing-greedy.yaml  # the same pool file, repeats sharing their noise
  sed -e 's/^name: sim-routing$/name: sim-routing-greedy/' -e 's/^    seed: 0$/    seed: 0\n    repeat_corr: 1.0/' \
    agents/sim-routing.yaml > "$POOL"
  EXTRA=('pool.options={sim:{repeat_corr:1.0}}')
fi
for seed in 21 22 23; do
  [ -f "$OUT/seed$seed/results.json" ] || \
    puppeteer train pool=sim-routing suite=mix-routing lam=0.1 seed=$seed out=$OUT/seed$seed \
      progress=false wandb.enabled=false "${EXTRA[@]}"
  cp "$OUT/seed$seed/results.json" "$RES/seed$seed.json"
done
puppeteer ab single:sonnet35-cot puppeteer:$OUT/seed21/best puppeteer:$OUT/seed22/best puppeteer:$OUT/seed23/best \
  --rules --rule-cost usd --lam 0.1 --pool "$POOL" --suite mix-routing --n 400 --out $OUT/ab
cp $OUT/ab/arms.md $OUT/ab/arms.json $OUT/ab/arms.png "$RES/"
python experiments/train-defaults/routes.py $OUT/ab > "$RES/routes.json"
