#!/usr/bin/env bash
# The warm-started conductor (configs/conductor/cpu-smollm2-warm.yaml: SmolLM2-135M fine-tuned on the best plan
# per training question, then GRPO) on sim-routing at lambda 0.1 per US cent, seeds 601.. (no other page uses
# them), then every arm on the same 200 held-out items and draws: each seed's conductor after its warm start
# (RUN/warm_start) and after GRPO (RUN), the step-wise routers of experiments/train-defaults (the same world and
# price), the best rule and the best single agent (chosen on the 200 training items at the same price).
# The conductor's reward is 1 right, 0.5 wrong (0 unparsable) minus workflow_lam x cents: half a point per right
# answer, so workflow_lam 0.05 prices a cent as lambda 0.1 does in the rules' return (accuracy - 0.1 x cents).
# Backend: sim (workers); the conductor runs on transformers on the CPU.
#   SEEDS=601 experiments/conductor-warm/run.sh                 # the committed run: the warm start alone
#   SEEDS="601 602 603" GRPO_STEPS=10 experiments/conductor-warm/run.sh   # then GRPO (the run's own arm too)
set -euo pipefail
cd "$(dirname "$0")/../.."
OUT=runs/conductor-warm
RES=experiments/conductor-warm/results
SEEDS=${SEEDS:-"601 602 603"}
GRPO_STEPS=${GRPO_STEPS:-0}   # 0: no GRPO, the warm-started conductor is the run's final one
ROUTERS=runs/train-defaults/independent-repeats   # experiments/train-defaults/run.sh independent-repeats
mkdir -p "$OUT" "$RES"
ARMS=()
for seed in $SEEDS; do
  [ -f "$OUT/s$seed/results.json" ] || \
    OMP_NUM_THREADS=${OMP_NUM_THREADS:-2} puppeteer train track=conductor conductor=cpu-smollm2-warm \
      pool=sim-routing suite=mix-routing final_answer=plan cost_model=usd workflow_lam=0.05 seed=$seed \
      out=$OUT/s$seed n_eval=20 warm_start.plans_file=$OUT/plans.jsonl grpo.max_steps=$GRPO_STEPS \
      wandb.enabled=false
  cp "$OUT/s$seed/results.json" "$RES/s$seed.json"
  cp "$OUT/s$seed/warm_start/sft_log.json" "$RES/s${seed}_sft_log.json"
  ARMS+=("conductor:grpo:$OUT/s$seed/warm_start")
  [ "$GRPO_STEPS" -gt 0 ] && ARMS+=("conductor:grpo:$OUT/s$seed")
done
cp "$OUT/plans.jsonl" "$RES/kept_plans.jsonl"
for seed in 21 22 23; do
  [ -d "$ROUTERS/seed$seed/best" ] && ARMS+=("puppeteer:$ROUTERS/seed$seed/best")
done
puppeteer ab "${ARMS[@]}" --rules --rule-cost usd --lam 0.1 --pool sim-routing --suite mix-routing --n 200 \
  --out $OUT/ab
python experiments/conductor-warm/report.py $OUT/ab --lam 0.1 --out $RES
cp $OUT/ab/arms.md $OUT/ab/arms.json $OUT/ab/arms.png "$RES/"
