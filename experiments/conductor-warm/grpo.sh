#!/usr/bin/env bash
# GRPO after the warm start (issue 59 section 3), seeds 601-603: each seed's fine-tuned SmolLM2-135M from
# run.sh (runs/conductor-warm/s<seed>/warm_start/final, read back instead of fine-tuning again) trained on with
# GRPO, one training question and 8 sampled plans a step, unscaled advantages (the preset's), then evaluated on
# the same 200 held-out items and draws as run.sh's A/B, beside its own warm start, the best rule and the best
# single agent. Backend: sim workers; the conductor on transformers on the CPU.
#   GRPO_STEPS=40 experiments/conductor-warm/grpo.sh    # the committed runs: 16-18 minutes of GRPO a seed alone on one core
#   SEEDS="601" experiments/conductor-warm/grpo.sh      # one seed
set -euo pipefail
cd "$(dirname "$0")/../.."
OUT=runs/conductor-warm
RES=experiments/conductor-warm/results/grpo
GRPO_STEPS=${GRPO_STEPS:-40}
SEEDS=${SEEDS:-601 602 603}
mkdir -p "$RES"
ARMS=()
for SEED in $SEEDS; do
  RUN=$OUT/s${SEED}g
  [ -d "$OUT/s$SEED/warm_start/final" ] || { echo "run experiments/conductor-warm/run.sh first (seed $SEED)"; exit 1; }
  mkdir -p "$RUN/warm_start"
  [ -d "$RUN/warm_start/final" ] || cp -r "$OUT/s$SEED/warm_start/final" "$RUN/warm_start/"
  [ -f "$RUN/results.json" ] || \
    OMP_NUM_THREADS=${OMP_NUM_THREADS:-1} puppeteer train track=conductor conductor=cpu-smollm2-warm \
      pool=sim-routing suite=mix-routing final_answer=plan cost_model=usd workflow_lam=0.05 seed=$SEED out=$RUN \
      n_eval=20 eval.before=false warm_start.plans_file=$OUT/plans.jsonl grpo.max_steps=$GRPO_STEPS \
      wandb.enabled=false
  ARMS+=("conductor:grpo:$RUN")
done
rm -rf $OUT/ab-grpo  # the script's own A/B, regenerated whole (no arm of another run left beside it)
puppeteer ab "${ARMS[@]}" --rules --rule-cost usd --lam 0.1 --pool sim-routing --suite mix-routing \
  --n 200 --out $OUT/ab-grpo
# the GRPO arms, their rules, and each seed's warm start from run.sh's A/B (the same items and draws)
VS=$OUT/ab-grpo-vs
rm -rf $VS && mkdir -p $VS
for SEED in $SEEDS; do
  for arm in $OUT/ab-grpo/*_s${SEED}g $OUT/ab/*_s${SEED}_warm_start; do
    ln -sfn "$(realpath "$arm")" "$VS/$(basename "$arm")"
  done
  cp "$OUT/s${SEED}g/results.json" "$RES/s${SEED}g.json"
  cp "$OUT/s${SEED}g/metrics.jsonl" "$RES/s${SEED}g_metrics.jsonl"
done
for arm in $OUT/ab-grpo/*best-rule* $OUT/ab-grpo/*best-single*; do
  ln -sfn "$(realpath "$arm")" "$VS/$(basename "$arm")"
done
python experiments/conductor-warm/report.py $VS --lam 0.1 --out $RES
