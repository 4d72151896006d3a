#!/bin/bash
# scratch probe: baselines table, 3 models, jobs 1 vs 3, OMP wait policy default vs PASSIVE
cd /work/main && . .venv/bin/activate
export HF_HUB_OFFLINE=1 LITELLM_OFFLINE_MODE=true
OUT=runs/jobs-probe; mkdir -p $OUT
for arm in "j1:1:" "j3:3:" "j3p:3:PASSIVE" "j1p:1:PASSIVE" "j3b:3:" ; do
  IFS=: read name jobs omp <<< "$arm"
  rm -rf $OUT/$name; mkdir -p $OUT/$name
  t0=$(date +%s.%N)
  if [ -n "$omp" ]; then export OMP_WAIT_POLICY=$omp; else unset OMP_WAIT_POLICY; fi
  python experiments/baselines-local/baselines_table.py --pool local --suites gsm8k --n 8 --specs single:qwen1.5b-cot single:qwen0.5b-cot single:smollm2-cot --jobs $jobs --cache $OUT/$name/responses.sqlite --runs-dir $OUT/$name/runs --out $OUT/$name/table.md --no-plot --quiet > $OUT/$name/log 2>&1
  t1=$(date +%s.%N)
  echo "$name jobs=$jobs omp=${omp:-default} wall=$(echo "$t1 - $t0" | bc) load=$(cut -d' ' -f1 /proc/loadavg)" >> $OUT/summary.txt
done
