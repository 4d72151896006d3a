#!/usr/bin/env bash
# The warm-started conductor with cascade plans on the replayed real table (issue 59 section 4, the third
# world): pool `local-mix-steps` (llama.cpp Qwen2.5-Coder 1.5B / 0.5B, every agent alone on every item and
# the verifiers' recorded second steps), offered the nine agents the step-wise routers of
# experiments/steps-learner are (eight solvers and the 0.5B verifier), suite `mix-local`, lambda 1 per
# model minute (workflow_lam 0.5: the conductor's reward is 1 right, 0.5 wrong). Seeds 631.. (no other
# page uses them).
# Training runs under strict replay: a plan step sends the request step mode sends (the question; a
# solver sees no earlier step), so every single, vote, cascade and solver pair replays, and a verifier
# after a kind's recorded first agent; the warm-start search leaves a plan unscored on a question where
# the table lacks one of its calls (a verifier after another agent). No held-out pass in training
# (eval.before=false): the A/B is the evaluation.
# The A/B: the conductors on the 320 held-out items of the steps-learner's by-kind page (the suite's
# seed-0 draw, the items the table holds; a replayed call is greedy, so the run seed changes no outcome),
# beside that page's finished runs on the same items: its best rule, its best single agent and its
# five by-kind step-wise routers (seeds 351-355). Run `SEED=351 experiments/steps-learner/dims.sh kind`
# first. Each conductor plans the held-out items in its own `puppeteer eval` (seeds can run side by side)
# under replay `on`: a plan whose call the table lacks calls the model (`cache_misses` in its results.json
# counts such calls); the A/B pairs the finished runs.
#   experiments/conductor-warm/replayed.sh            # the search once (~30 min), ~30 min a seed, the A/B
set -euo pipefail
cd "$(dirname "$0")/../.."
AGENTS=qwen1.5b-cot,qwen1.5b-pot,qwen1.5b-direct,qwen1.5b-code,qwen0.5b-pot,qwen0.5b-direct,qwen0.5b-calc,qwen0.5b-code,qwen0.5b-verify
QS=${QS:-runs/qs-dims/kkind-s351/eval}
OUT=runs/conductor-warm/local-mix-cascade
RES=experiments/conductor-warm/results/local-mix-cascade
SEEDS=${SEEDS:-"631 632 633"}
for arm in best-rule_200 best-single_200 puppeteer-seed351; do
  [ -f "$QS/$arm/results.json" ] || { echo "missing $QS/$arm: run SEED=351 experiments/steps-learner/dims.sh kind first" >&2; exit 1; }
done
mkdir -p "$OUT" "$RES"
ARMS=()
for seed in $SEEDS; do
  [ -f "$OUT/s$seed/results.json" ] || \
    PUPPETEER_REPLAY=strict OMP_NUM_THREADS=${OMP_NUM_THREADS:-2} puppeteer train track=conductor \
      conductor=cpu-smollm2-warm pool=local-mix-steps "++available=[$AGENTS]" suite=mix-local \
      final_answer=cascade cost_model=minutes workflow_lam=0.5 seed=$seed out=$OUT/s$seed eval.before=false \
      warm_start.plans_file=$OUT/plans.jsonl warm_start.draws=1 grpo.max_steps=0 wandb.enabled=false
  cp "$OUT/s$seed/results.json" "$RES/s$seed.json"
  cp "$OUT/s$seed/warm_start/sft_log.json" "$RES/s${seed}_sft_log.json"
  EVAL=$OUT/evals/conductor_grpo_s${seed}_warm_start  # the conductor on the held-out items (replay on)
  [ -f "$EVAL/results.json" ] || \
    PUPPETEER_REPLAY=on OMP_NUM_THREADS=${OMP_NUM_THREADS:-2} puppeteer eval \
      --policy "conductor:grpo:$OUT/s$seed/warm_start" --pool local-mix-steps --suite mix-local --split test \
      --n 320 --seed 0 --max-steps 3 --lam 1 --out "$EVAL"
  cp "$EVAL/results.json" "$RES/s${seed}_heldout_eval.json"  # its own tokens; cache_misses: calls not replayed
  ARMS+=("$EVAL")
done
cp "$OUT/plans.jsonl" "$RES/kept_plans.jsonl"
[ "${AB:-1}" = 1 ] || exit 0
ROUTERS=("$QS"/puppeteer-seed35[1-5])
puppeteer ab "${ARMS[@]}" "$QS/best-rule_200" "$QS/best-single_200" "${ROUTERS[@]}" \
  --lam 1 --pool local-mix-steps --suite mix-local --n 320 --seed 0 --max-steps 3 --out $OUT/ab --overwrite
python experiments/conductor-warm/report.py $OUT/ab --lam 1 --pool local-mix-steps --cost minutes \
  --backend "llama.cpp Qwen2.5-Coder 1.5B / 0.5B, replayed (\`local-mix-steps\`; suite \`mix-local\`)" --out "$RES"
cp $OUT/ab/arms.md $OUT/ab/arms.json $OUT/ab/arms.png "$RES/"
