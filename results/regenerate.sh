#!/usr/bin/env bash
# Every committed output made again, in place, from the committed records: each sweep's diagnosis.txt, each report
# under results/tables (the command its report.md names), the diagnosis benchmark's table, the what-if outputs
# (results/whatif/README.md's commands). Then `git status` lists what changed: nothing, unless a change meant it
# (then commit the regenerated files and say why). Pure computation: no run, no GPU; ~10 min on 2 cores.
set -euo pipefail
cd "$(dirname "$0")/.."
export OMP_NUM_THREADS=1 WANDB_MODE=disabled
for f in results/runs/*/diagnosis.txt; do
  python -m diagnosis "$(dirname "$f")" > "$f"
done
grep -rh "regenerate with" results/tables --include=report.md | sed 's/.*regenerate with `//; s/`\.$//' |
  while read -r cmd; do eval "$cmd" > /dev/null; done
python -m diagnosis.benchmark --table results/diagnosis_benchmark > /dev/null || [ $? = 1 ]  # 1: a goal missed
python -m diagnosis.benchmark --table results/diagnosis_benchmark_script > /dev/null || [ $? = 1 ]  # 1: a goal missed
python -m tasks.script.cost --table results/script_cost
python -m diagnosis.hiccup_power > /dev/null
python -m tasks.script.cost --table results/script_cost/vgg11_224
python -m tasks.script.cost --table results/script_cost/ddp_logging
python -m tasks.script.cost --table results/script_cost/ddp_logging_others
python -m whatif results/runs/vgg11_accumulate/0 --sweep bucket=25,100,2000 optim=none,bf16,powersgd \
  --out results/whatif/vgg11_accumulate_0 --samples 2000 > /dev/null
python -m whatif.sources --out results/whatif --samples 2000 > /dev/null
python -m whatif.validate results/runs/{collectives,ddp_knobs_vgg11,grad_sync_vgg11,pair_groups,scaling_vgg11} \
  results/runs/{time_to_verdict,vgg11_accumulate,vgg11_bucket100,vgg11_local,vgg11_raw_folder,vgg11_sync} \
  results/runs/{vit_ddp_optimizations,vit_ddp_overhead} --out results/whatif/validation_committed --samples 2000 \
  > /dev/null
python -m whatif.validate results/runs/link_comm_bound --out results/whatif/validation_link --samples 1000 > /dev/null
python -m stats.calibrate_verify > results/verify_calibration/table.md || [ $? = 1 ]  # 1: rows miss
python -m results.verify_aa results/verify_calibration/aa --out results/verify_calibration/aa.md > /dev/null
git status --porcelain -- results
test -z "$(git status --porcelain -- results)"
