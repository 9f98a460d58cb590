#!/usr/bin/env bash
# The GPU checks of docs/device.md, as one call on a lent GPU machine (the workplace's device tool): pytest -m gpu,
# then each command docs/device.md and the README name for a GPU box. Everything it prints goes to $OUT/console.txt;
# the run directories (records, train.log, NCCL's INFO lines) to $OUT/runs.tar.gz. The image there has torch but not
# Hydra: the wheels travel in .whl/ (pip wheel --no-deps hydra-core omegaconf antlr4-python3-runtime submitit
# hydra-submitit-launcher, made on the project's machine).
set -u
OUT=${OUT:-/tmp/gpu_out}; mkdir -p "$OUT"; RUNS=/tmp/gpu_runs; rm -rf "$RUNS"; mkdir -p "$RUNS"
exec > >(tee "$OUT/console.txt") 2>&1
export PYTHONUNBUFFERED=1 WANDB_MODE=disabled
if [ -d .whl ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    && export PYTHONPATH=/tmp/site || exit 1
fi
step() { local name=$1 limit=$2; shift 2; echo; echo "===== $name: $* (limit ${limit}s)"; local t0=$SECONDS
         timeout "$limit" "$@"; echo "===== $name: exit $? after $((SECONDS - t0)) s"; }
echo "===== machine"; date -u; nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv
python3 -c "import torch, sys; print('python', sys.version.split()[0], 'torch', torch.__version__, 'cuda', torch.version.cuda, 'nccl', torch.cuda.nccl.version(), torch.cuda.get_device_name(0))"
step pytest_gpu 300 python3 -m pytest -m gpu -rA -p no:cacheprovider tests/test_gpu.py tests/test_comm_tasks.py
step side_stream 90 python3 train.py model=vgg11_tiny scale=smoke logger=none world_size=1 backend=nccl h2d=side_stream hydra.run.dir=$RUNS/side_stream
step cuda_graphs 90 python3 train.py model=vgg11_tiny scale=smoke logger=none world_size=1 backend=nccl cuda_graphs=true hydra.run.dir=$RUNS/cuda_graphs
step paper_scale 180 python3 train.py logger=none nccl.DEBUG=INFO hydra.run.dir=$RUNS/paper_scale
step collectives 90 python3 train.py task=collectives logger=none hydra.run.dir=$RUNS/collectives
tar -czf "$OUT/runs.tar.gz" -C "$RUNS" . && ls -la "$OUT"
