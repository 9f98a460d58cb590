"""cuda_graphs=true: forward + backward + optimizer step captured once as one CUDA graph and
replayed (source 002), following PyTorch's rules for whole-network capture with DDP (CUDA graph
notes, "Usage with DistributedDataParallel"): static input buffers, at least 11 DDP-enabled eager
iterations on a side stream before capture (DDP's own set-up happens there), DDP constructed under a
side stream and a static graph (tasks/train/ddp.py), and TORCH_NCCL_ASYNC_ERROR_HANDLING=0 set
before the process group starts (comm/env.py).

A replay runs no Python, so DDP's runtime statistics cannot time the communication inside it: the
last eager warm-up iterations before capture are the probe (the replayed graph runs the same
kernels), and the record says so.

The replayed step has three timed phases: data (host batch), h2d (copy into the static input
buffers), graph_replay. Streams and the capture come from the device layer: device=fake replays the
step eagerly with the stream rules checked, so this path runs in the CPU test suite."""

from __future__ import annotations

from tasks.train.probes import ddp_comm_probe

EAGER_WARMUP = 11
PROBE_METHOD = (
    "DDP runtime stats (reducer timers) over eager steps just before capture (a replay runs no "
    "Python, "
    "so DDP cannot time it; the graph replays the same kernels): time = first bucket all-reduce "
    "start to "
    "last finish; exposed = time - overlap with backward compute"
)


def problems(cfg, placement) -> list[str]:
    """Why this run cannot be captured (empty: it can). placement: where the ranks run
    (device/placement.py), or None when only the compute nodes know (submitting to Slurm): then the
    request is checked instead."""
    found = []
    kind = placement.kind if placement is not None else None
    backend = placement.backend if placement is not None else str(cfg.backend)
    if kind == "cpu":
        found.append(f"the ranks run on CPU ({placement.how}): capture needs one GPU per rank")
    elif kind is None and cfg.launcher.name != "local" and not cfg.launcher.get("gpus_per_node"):
        found.append("no GPUs requested: set launcher.gpus_per_node (one GPU per rank)")
    if kind == "cuda" and placement.shared:
        found.append("ranks share GPUs (device=cuda backend=gloo): capture needs one GPU per rank")
    if backend == "gloo" and cfg.sync != "local" and kind != "fake":
        found.append(
            "backend=gloo: its CUDA path waits on the host, which a capture cannot hold: use "
            "backend=nccl, "
            "or sync=local"
        )
    if cfg.sync not in ("ddp", "local"):
        found.append(
            f"sync={cfg.sync} (its Python all-reduce loop runs outside the graph): use sync=ddp or "
            "local"
        )
    if cfg.optim.name != "none":
        found.append(
            f"optim={cfg.optim.name} (comm hooks run Python callbacks a replay skips): use "
            "optim=none"
        )
    if cfg.accumulate != 1:
        found.append(
            "accumulate>1 (no_sync micro-steps change the captured graph): use accumulate=1"
        )
    if cfg.ddp.find_unused_parameters:
        found.append("ddp.find_unused_parameters=true (needs a dynamic graph): set it false")
    return found


class GraphedStep:
    def __init__(
        self,
        model,
        optimizer,
        criterion,
        autocast,
        host_batches,
        feeder,
        timer,
        dev,
        sync,
        probe_steps: int,
    ):
        self.host_batches, self.feeder, self.timer = host_batches, feeder, timer
        x, y = feeder.to_device(next(host_batches))
        self.static_x, self.static_y = x.clone(), y.clone()

        def step():
            optimizer.zero_grad(set_to_none=True)
            with autocast():
                loss = criterion(model(self.static_x), self.static_y)
            loss.backward()
            optimizer.step()
            return loss.detach()

        side, compute = dev.new_stream(), dev.current_stream()
        side.wait_stream(compute)
        with dev.use_stream(side):
            for _ in range(EAGER_WARMUP):
                step()
            self.comm_stats = ddp_comm_probe(
                sync, step, probe_steps
            )  # turns DDP's sampling off again: capture
        compute.wait_stream(side)  # must not synchronise the host
        if self.comm_stats is not None:
            self.comm_stats["method"] = PROBE_METHOD
        self.graph = dev.capture(step)

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
            loss = self.graph.replay()
        return loss.clone()
