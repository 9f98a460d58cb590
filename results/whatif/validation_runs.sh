#!/usr/bin/env bash
# The what-if model's validation runs on emulated links (issue 24). Needs root (network namespaces and tc: the
# emulated links, `link=`) and a quiet 2-core machine; about 5 h in all. Then regenerate the tables:
#   python -m whatif.validate results/runs/whatif_vgg11 --out results/whatif/validation_emulated/vgg11 --samples 2000
#   (and the same for whatif_vgg11_ws4 with --source, and whatif_vit; see results/whatif/README.md)
# Times per run are estimates from the committed VGG11 runs (2.4 s steps unshaped, ~5.3 s at 1 Gbit/s; ~2 min a job
# with start-up, warm-up, a 90 s window and the probes) and the smoke ViT-L/32 runs (~2.5 s steps; its 1.23 GB of
# gradients take ~10 s per step at 1 Gbit/s).
set -euo pipefail
cd "$(dirname "$0")/../.."
common=(logger=none probe_steps=3 diagnose.microbench=true)

# VGG11 at 224x224, 4 images per rank, 2 ranks (scale=auto on CPU): 57 jobs, ~2.2 h
python train.py -m "${common[@]}" link=none,10gbe,1gbe optim=none,bf16,powersgd repeats=3 \
  hydra.sweep.dir=results/runs/whatif_vgg11/optim
python train.py -m "${common[@]}" link=none,10gbe,1gbe bucket=25,100,2000 repeats=2 \
  hydra.sweep.dir=results/runs/whatif_vgg11/bucket
python train.py -m "${common[@]}" link=none,10gbe,1gbe accumulate=4 repeats=2 \
  hydra.sweep.dir=results/runs/whatif_vgg11/accumulate
python train.py -m "${common[@]}" link=none,10gbe,1gbe sync=per_param repeats=2 \
  hydra.sweep.dir=results/runs/whatif_vgg11/per_param

# VGG11, 4 ranks on the 2 cores (the most they hold at ~3 GB a rank): 8 jobs, ~35 min
python train.py -m "${common[@]}" world_size=4 link=none,1gbe optim=none,bf16 repeats=2 \
  hydra.sweep.dir=results/runs/whatif_vgg11_ws4

# ViT-L/32 at scale=smoke (64x64, 2 images per rank, 6 steps), 2 ranks: 30 jobs, ~1.3 h
python train.py -m "${common[@]}" model=vit_l_32 scale=smoke link=none,10gbe,1gbe optim=none,bf16,powersgd repeats=2 \
  hydra.sweep.dir=results/runs/whatif_vit/optim
python train.py -m "${common[@]}" model=vit_l_32 scale=smoke link=none,10gbe,1gbe bucket=25,2000 repeats=2 \
  hydra.sweep.dir=results/runs/whatif_vit/bucket
