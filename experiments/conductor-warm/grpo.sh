#!/usr/bin/env bash
# GRPO after the warm start (issue 59 section 3), seed 601: the fine-tuned SmolLM2-135M of run.sh's seed 601
# (runs/conductor-warm/s601/warm_start/final, read back instead of fine-tuning again) trained on with GRPO,
# one training question and 8 sampled plans a step, unscaled advantages (the preset's), then evaluated on the
# same 200 held-out items and draws as run.sh's A/B, beside its own warm start, the best rule and the best
# single agent. Backend: sim workers; the conductor on transformers on the CPU.
#   GRPO_STEPS=40 experiments/conductor-warm/grpo.sh    # the committed run: 18 minutes of GRPO on one core
set -euo pipefail
cd "$(dirname "$0")/../.."
OUT=runs/conductor-warm
RES=experiments/conductor-warm/results/grpo_s601
GRPO_STEPS=${GRPO_STEPS:-40}
RUN=$OUT/s601g
[ -d "$OUT/s601/warm_start/final" ] || { echo "run experiments/conductor-warm/run.sh first (seed 601)"; exit 1; }
mkdir -p "$RUN/warm_start" "$RES"
[ -d "$RUN/warm_start/final" ] || cp -r "$OUT/s601/warm_start/final" "$RUN/warm_start/"
[ -f "$RUN/results.json" ] || \
  OMP_NUM_THREADS=${OMP_NUM_THREADS:-1} puppeteer train track=conductor conductor=cpu-smollm2-warm \
    pool=sim-routing suite=mix-routing final_answer=plan cost_model=usd workflow_lam=0.05 seed=601 out=$RUN \
    n_eval=20 eval.before=false warm_start.plans_file=$OUT/plans.jsonl grpo.max_steps=$GRPO_STEPS \
    wandb.enabled=false
puppeteer ab "conductor:grpo:$RUN" --rules --rule-cost usd --lam 0.1 --pool sim-routing --suite mix-routing \
  --n 200 --out $OUT/ab-grpo
# the GRPO arm, its rules, and seed 601's warm start from run.sh's A/B (the same items and draws)
VS=$OUT/ab-grpo-vs
mkdir -p $VS
for arm in $OUT/ab-grpo/*_s601g $OUT/ab-grpo/*best-rule* $OUT/ab-grpo/*best-single* $OUT/ab/*_s601_warm_start; do
  ln -sfn "$(realpath "$arm")" "$VS/$(basename "$arm")"
done
python experiments/conductor-warm/report.py $VS --lam 0.1 --out $RES
cp "$RUN/results.json" "$RES/s601g.json"
cp "$RUN/metrics.jsonl" "$RES/s601g_metrics.jsonl"
