#!/usr/bin/env bash
# GRPO after the cascade warm start on `sim-local` (issue 59 section 3: several questions a step, unscaled
# advantages): a seed's fine-tuned SmolLM2-135M from world.sh (runs/conductor-warm/sim-local-cascade/s<seed>/
# warm_start/final, read back, not fine-tuned again) trained on with GRPO, QUESTIONS training questions and 8
# plans sampled at temperature 1 a step (gradient accumulation over the questions), STEPS steps; then it
# plans world.sh's 320 held-out items and draws (--seed 301) in its own `puppeteer eval`, and the A/B pairs it
# with its own warm start, the best rule and the best single agent of world.sh's A/B (finished runs, the
# same items: with three conductor seeds, the A/B's arms D and E). Seed 622: the seed that writes the wrong
# trigger on 36 of 80 HumanEval items. QUESTIONS=2 needs the 24 GB machine to itself (15.8 GB resident).
# Backend: sim workers; the conductor on transformers on the CPU.
#   FINAL=cascade SEEDS="622" experiments/conductor-warm/world.sh   # first
#   SEEDS="622" experiments/conductor-warm/grpo-cascade.sh          # ~49 min of GRPO and 13 of planning a seed on one core
set -euo pipefail
cd "$(dirname "$0")/../.."
OUT=runs/conductor-warm/sim-local-cascade
RES=experiments/conductor-warm/results/sim-local-cascade-grpo
SEEDS=${SEEDS:-622}
STEPS=${STEPS:-21}  # the committed run: 20 steps, then one more when it was started again from its checkpoint
QUESTIONS=${QUESTIONS:-2}
mkdir -p "$RES"
ARMS=()
for SEED in $SEEDS; do
  RUN=$OUT/s${SEED}g
  [ -d "$OUT/s$SEED/warm_start/final" ] || { echo "missing $OUT/s$SEED: run FINAL=cascade SEEDS=$SEED experiments/conductor-warm/world.sh first" >&2; exit 1; }
  mkdir -p "$RUN/warm_start"
  [ -d "$RUN/warm_start/final" ] || cp -r "$OUT/s$SEED/warm_start/final" "$RUN/warm_start/"
  [ -f "$RUN/results.json" ] || \
    OMP_NUM_THREADS=${OMP_NUM_THREADS:-1} puppeteer train track=conductor conductor=cpu-smollm2-warm \
      pool=sim-local suite=mix-local final_answer=cascade cost_model=minutes workflow_lam=0.5 seed=$SEED \
      out=$RUN eval.before=false warm_start.plans_file=$OUT/plans.jsonl warm_start.draws=1 \
      grpo.max_steps=$STEPS grpo.gradient_accumulation_steps=$QUESTIONS wandb.enabled=false
  cp "$RUN/results.json" "$RES/s${SEED}g.json"
  cp "$RUN/metrics.jsonl" "$RES/s${SEED}g_metrics.jsonl"
  cp "$RUN/samples.jsonl" "$RES/s${SEED}g_samples.jsonl"  # every sampled plan, its reward and cost
  EVAL=$OUT/evals/conductor_grpo_s${SEED}g
  [ -f "$EVAL/results.json" ] || \
    OMP_NUM_THREADS=${OMP_NUM_THREADS:-1} puppeteer eval --policy "conductor:grpo:$RUN" --pool sim-local \
      --suite mix-local --split test --n 320 --seed 301 --max-steps 3 --lam 1 --out "$EVAL"
  cp "$EVAL/results.json" "$RES/s${SEED}g_heldout_eval.json"
  ARMS+=("$EVAL" "$OUT"/ab/*_s${SEED}_warm_start)
done
[ "${AB:-1}" = 1 ] || exit 0
puppeteer ab "${ARMS[@]}" "$OUT"/ab/D_best-rule_200_minutes "$OUT"/ab/E_best-single_200_minutes --lam 1 \
  --pool sim-local --suite mix-local --n 320 --seed 301 --max-steps 3 --out $OUT/ab-grpo --overwrite
python experiments/conductor-warm/report.py $OUT/ab-grpo --lam 1 --pool sim-local --cost minutes \
  --backend "sim (\`sim-local\`, calibrated on the local-mix table; suite \`mix-local\`)" --out "$RES"
cp $OUT/ab-grpo/arms.md $OUT/ab-grpo/arms.json "$RES/"
