"""cuda_graphs=true: forward + backward + optimizer step captured once as one CUDA graph and replayed (seed 002),
following PyTorch's rules for whole-network capture with DDP: static input buffers, at least 11 eager warm-up
iterations on a side stream before capture (DDP's own set-up happens there), a static graph, and
TORCH_NCCL_ASYNC_ERROR_HANDLING=0 set before the process group starts (core/rank.py does that).

The replayed step has three timed phases: data (host batch), h2d (copy into the static input buffers), graph_replay."""
from __future__ import annotations

import torch

EAGER_WARMUP = 11


class GraphedStep:
    def __init__(self, model, optimizer, criterion, autocast, host_batches, feeder, timer, device):
        self.host_batches, self.feeder, self.timer = host_batches, feeder, timer
        x, y = feeder.to_device(next(host_batches))
        self.static_x, self.static_y = x.clone(), y.clone()
        side = torch.cuda.Stream(device)
        side.wait_stream(torch.cuda.current_stream(device))
        with torch.cuda.stream(side):
            for _ in range(EAGER_WARMUP):
                optimizer.zero_grad(set_to_none=True)
                with autocast():
                    loss = criterion(model(self.static_x), self.static_y)
                loss.backward()
                optimizer.step()
        torch.cuda.current_stream(device).wait_stream(side)
        self.graph = torch.cuda.CUDAGraph()
        optimizer.zero_grad(set_to_none=True)
        with torch.cuda.graph(self.graph):
            with autocast():
                self.static_loss = criterion(model(self.static_x), self.static_y)
            self.static_loss.backward()
            optimizer.step()

    def __call__(self):
        t = self.timer
        t.start_step()
        with t.phase("data"):
            batch = next(self.host_batches)
        with t.phase("h2d"):
            x, y = self.feeder.to_device(batch)
            self.static_x.copy_(x, non_blocking=True)
            self.static_y.copy_(y, non_blocking=True)
        with t.phase("graph_replay"):
            self.graph.replay()
        return self.static_loss.detach().clone()
