#!/usr/bin/env bash
# The warm-started conductor of run.sh in a second world: `sim-local` (the simulator calibrated on the real
# local-mix table: Qwen2.5-Coder 1.5B / 0.5B, eight solvers and the 0.5B verifier), suite `mix-local`, priced
# at lambda 1 per model minute (the quickstart's price; the conductor's reward is 1 right, 0.5 wrong, so
# workflow_lam 0.5 prices a minute as lambda 1 does in the rules' return, accuracy - 1 x minutes).
# Seeds 611.. (no other page uses them). Warm start (every single, ordered pair and vote of three of the nine
# agents on each of the 200 training questions, one draw as in experiments/plan-space world (b): 13 s a plan
# on one core here, where sim-routing's three draws took 4; each question keeps its kind's best plan), one epoch
# of fine-tuning, no GRPO; then the conductors, the best rule and the best single agent (chosen on the 200
# training items at the same price) on the same 320 held-out items and draws.
# Backend: sim (workers); the conductor (SmolLM2-135M) runs on transformers on the CPU.
# FINAL=cascade: the plans may be cascades (final_answer=cascade: `final = 'cascade:TRIGGER'`, a later step only
# when the trigger fires on the answer before it), and the search adds every ordered pair as a cascade on each
# trigger (381 plans); seeds 621..; under runs/conductor-warm/sim-local-cascade and results/sim-local-cascade.
#   SEEDS="611 612 613" experiments/conductor-warm/world.sh     # the search 12 minutes once, then ~30 minutes a seed
#   FINAL=cascade SEEDS="621 622 623" experiments/conductor-warm/world.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
WORLD=sim-local
FINAL=${FINAL:-plan}
NAME=$WORLD
[ "$FINAL" = plan ] || NAME=$WORLD-$FINAL
OUT=runs/conductor-warm/$NAME
RES=experiments/conductor-warm/results/$NAME
SEEDS=${SEEDS:-"611 612 613"}
mkdir -p "$OUT" "$RES"
ARMS=()
for seed in $SEEDS; do
  [ -f "$OUT/s$seed/results.json" ] || \
    OMP_NUM_THREADS=${OMP_NUM_THREADS:-2} puppeteer train track=conductor conductor=cpu-smollm2-warm \
      pool=$WORLD suite=mix-local final_answer=$FINAL cost_model=minutes workflow_lam=0.5 seed=$seed \
      out=$OUT/s$seed n_eval=20 warm_start.plans_file=$OUT/plans.jsonl warm_start.draws=1 grpo.max_steps=0 wandb.enabled=false
  cp "$OUT/s$seed/results.json" "$RES/s$seed.json"
  cp "$OUT/s$seed/warm_start/sft_log.json" "$RES/s${seed}_sft_log.json"
  ARMS+=("conductor:grpo:$OUT/s$seed/warm_start")
done
cp "$OUT/plans.jsonl" "$RES/kept_plans.jsonl"
[ "${AB:-1}" = 1 ] || exit 0
# --seed 301: every arm on the 320 held-out items mix-local draws for seed 301 (80 a kind; a mix suite picks its
# items by the seed), episodes seeded by 301. Not sim-local-learner's items: its quickstart takes seed 0's draw of
# the mix (113 items in common with seed 301's). Compare within a page.
puppeteer ab "${ARMS[@]}" --rules --rule-cost minutes --lam 1 --pool $WORLD --suite mix-local --n 320 \
  --seed 301 --max-steps 3 --out $OUT/ab --overwrite
python experiments/conductor-warm/report.py $OUT/ab --lam 1 --pool $WORLD --cost minutes \
  --backend "sim (\`$WORLD\`, calibrated on the local-mix table; suite \`mix-local\`)" --out "$RES"
cp $OUT/ab/arms.md $OUT/ab/arms.json $OUT/ab/arms.png "$RES/"
for seed in $SEEDS; do  # each conductor arm's evaluation record (its own tokens: mean_conductor_*)
  cp "$OUT"/ab/*_s${seed}_warm_start/results.json "$RES/s${seed}_heldout_eval.json"
done
