#!/usr/bin/env bash
# The sources' communication findings on a CPU machine whose ranks sit behind emulated links (link=, issue 23; README
# "Emulated links", docs/links.md). Needs root (network namespaces, tc). Records go to results/runs/link_*, tables to
# results/tables/link_*; results/reproduce_cpu.sh (loopback) is left alone.
# Run from the repository root, as root, on a quiet machine:   sudo bash results/reproduce_link.sh
# A quick check that every command still works (tiny model, 1 repeat, a few steps, into a temporary directory; about
# 6 min on 2 cores; its numbers mean nothing):                 sudo QUICK=1 bash results/reproduce_link.sh
#
# Expected on 2 quiet cores (estimated from single runs on a loaded machine, so +-30%): block 1 35 min (36 jobs),
# block 2 12 min (18 jobs), block 3 15 min (9 jobs + 1), block 4 2 min; about 65 min in all.
#
# The rate: 1 Gbit/s (link=1gbe). VGG11 at scale=smoke (its 531 MB of fp32 gradients at full size, 64x64 inputs, 2
# images per rank) then spends ~75-85% of each step in the gradient sync (~4.5 s of ~5.5-6 s), the regime of source 003's
# PCIe-bound box (NCCL took 587 of 701 ms) and source 000's 16 nodes; on loopback the same step is compute-bound.
set -euo pipefail
cd "$(dirname "$0")/.."
[ "$(id -u)" -eq 0 ] || { echo "reproduce_link.sh: needs root (emulated links create network namespaces)" >&2; exit 2; }
export WANDB_MODE=disabled
REPEATS=3
BLOCKS=${BLOCKS:-1 2 3 4 5}   # e.g. BLOCKS="1 2 4" to leave one out (the tables of the blocks run are rebuilt)
if [ "${QUICK:-0}" = 1 ]; then
  R=$(mktemp -d /tmp/reproduce_link.XXXXXX)
  T=$R/tables
  REPEATS=1
  TRAIN=(model=vgg11_tiny steps=2)                                  # every train row, tiny
  GRAD=(model=vgg11_tiny grad_sync.iters=1 grad_sync.warmup_iters=0)
  COLL=(collectives.max_bytes=1M collectives.iters=2)
  echo "QUICK=1: tiny runs into $R (numbers not for use)"
else
  R=results/runs
  T=results/tables
  TRAIN=()
  GRAD=()
  COLL=()
  for b in $BLOCKS; do case $b in
    1) rm -rf $R/link_comm_bound $T/link_comm_bound;; 2) rm -rf $R/link_scaling_vgg11 $T/link_scaling_vgg11;;
    3) rm -rf $R/link_sync_vgg11 $R/link_grad_sync_vgg11 $T/link_sync_vgg11;; 4) rm -rf $R/link_collectives $T/link_collectives;;
    5) rm -rf $R/link_comm_bound_diagnosis;;
  esac; done
fi
OUT=(logger=none)
run() { [[ " $BLOCKS " == *" $1 "* ]]; }

# 1. (35 min, 36 jobs) Source 003's communication-bound table: DDP on 2 ranks behind 1 Gbit/s against one rank without
#    DDP, static graph, gradient as bucket view, bf16, PowerSGD, buckets 25/100/2000 with and without bf16, PowerSGD
#    with one bucket, accumulate=4 (conf/experiment/link_comm_bound.yaml, one variant per row), 3 interleaved repeats.
#    Also the issue's check that bf16 is called faster with its interval (row link_04_bf16 against the baseline).
run 1 && python train.py -m experiment=link_comm_bound repeats=$REPEATS "${TRAIN[@]}" "${OUT[@]}" \
  hydra.sweep.dir=$R/link_comm_bound

# 2. (12 min, 18 jobs) Source 004's scaling curve and the users' question: 1 rank without DDP and 2 DDP ranks, without a
#    link (loopback), behind 10 Gbit/s and behind 1 Gbit/s; samples/s and efficiency per world size with intervals.
run 2 && python train.py -m experiment=scaling model=vgg11 scale=smoke link=none,10gbe,1gbe repeats=$REPEATS "${TRAIN[@]}" \
  "${OUT[@]}" hydra.sweep.dir=$R/link_scaling_vgg11

# 3. (15 min, 9 jobs + 1) Source 000: the thread's per-parameter all-reduce loop against one flat buffer and DDP, behind
#    1 Gbit/s; then the thread's own comparison (task=grad_sync: per parameter, flat, buckets, coalesced, one call).
run 3 && python train.py -m sync=per_param,flat,ddp model=vgg11 scale=smoke link=1gbe repeats=$REPEATS "${TRAIN[@]}" \
  "${OUT[@]}" hydra.sweep.dir=$R/link_sync_vgg11
run 3 && python train.py -m task=grad_sync model=vgg11 link=1gbe "${GRAD[@]}" "${OUT[@]}" hydra.sweep.dir=$R/link_grad_sync_vgg11

# 4. (2 min) What the links carry: all_reduce busbw at 1 and 10 Gbit/s against the shaped rate (64 MiB at most).
run 4 && python train.py -m task=collectives link=1gbe,10gbe collectives.ops=[all_reduce] collectives.max_bytes=64M \
  "${COLL[@]}" "${OUT[@]}" hydra.sweep.dir=$R/link_collectives

# 5. (5 min, 3 jobs) The diagnosis of block 1's baseline row with its exposed communication measured (6 probe steps,
#    each with the phases timed apart; the committed block-1 records took 1 probe step to keep 36 jobs short, and the diagnosis
#    never acts on one sample). Its first finding should name the link and its next command a row block 1 shows faster.
run 5 && python train.py -m experiment=link_comm_bound variant=link_01_ddp probe_steps=6 repeats=$REPEATS "${TRAIN[@]}" \
  "${OUT[@]}" hydra.sweep.dir=$R/link_comm_bound_diagnosis

# Diagnosis of every sweep (reproduction 4: communication, not CPU contention, where communication dominates; its next
# command is a row of the same table), then the tables and plots from the records.
for d in link_comm_bound link_comm_bound_diagnosis link_scaling_vgg11 link_sync_vgg11 link_grad_sync_vgg11 link_collectives; do
  [ -d $R/$d ] && python -m diagnosis $R/$d > $R/$d/diagnosis.txt
done
[ -d $R/link_comm_bound ] && python -m results.report $R/link_comm_bound --out $T/link_comm_bound \
  --title "Source 003's comm-bound rows: VGG11 gradients, 2 gloo ranks behind an emulated 1 Gbit/s link, CPU"
[ -d $R/link_scaling_vgg11 ] && python -m results.report $R/link_scaling_vgg11 --out $T/link_scaling_vgg11 \
  --title "Scaling behind emulated links (none, 10 Gbit/s, 1 Gbit/s), VGG11 gradients (smoke), CPU"
[ -d $R/link_sync_vgg11 ] && python -m results.report $R/link_sync_vgg11 $R/link_grad_sync_vgg11 --out $T/link_sync_vgg11 \
  --title "Per-parameter all-reduce vs flat vs DDP behind an emulated 1 Gbit/s link, VGG11, CPU"
[ -d $R/link_collectives ] && python -m results.report $R/link_collectives --out $T/link_collectives \
  --title "all_reduce busbw behind emulated 1 and 10 Gbit/s links, CPU"
echo "reproduce_link.sh: records in $R/link_*, tables in $T/link_*"
