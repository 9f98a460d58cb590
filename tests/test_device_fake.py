"""The fake device (device/fake.py) enforces the stream rules on CPU, and the GPU code paths (H2D
feeders, the phase timer, CUDA graphs, DDP's side-stream construction) pass them; deliberate
violations are caught."""

import pytest
import torch
import torch.nn as nn
from omegaconf import OmegaConf

import device as device_layer
from device.fake import FakeDevice, HostSyncError, StreamRuleError
from device.placement import Placement
from tasks.train.h2d import NonBlockingFeeder, SideStreamFeeder, make_feeder, window_sync_check
from tasks.train.timing import PhaseTimer


def host_batches(n=10):
    return iter([(torch.full((2, 3), float(i)), torch.tensor([i, i])) for i in range(n)])


def feed(feeder, host, steps=4):
    """What the step loop does: data phase, h2d phase, compute on the batch; no host sync until the
    end."""
    labels = []
    for _ in range(steps):
        x, y = feeder.to_device(next(host))
        (x * 2).sum()
        labels.append(y.clone())
    feeder.dev.synchronize()
    return [int(y[0]) for y in labels]


class NoRecordStream(SideStreamFeeder):
    def to_device(self, batch):
        if self.pending is None:
            self.pending, batch = self._copy(batch), next(self.host_batches)
        current = self.pending
        self.dev.current_stream().wait_stream(self.stream)
        self.pending = self._copy(batch)
        return current


class NoWait(SideStreamFeeder):
    def to_device(self, batch):
        if self.pending is None:
            self.pending, batch = self._copy(batch), next(self.host_batches)
        current = self.pending
        for t in current:
            self.dev.record_stream(t, self.dev.current_stream())
        self.pending = self._copy(batch)
        return current


def test_side_stream_feeder_uses_every_batch_once_in_order():
    """Defect 9: batch 0 was copied twice and returned on two steps."""
    with FakeDevice() as dev:
        host = host_batches()
        assert feed(SideStreamFeeder(dev, host), host) == [0, 1, 2, 3]
    assert dev.counts["copies"] == 2 * 5  # 4 used + 1 in flight, x and y each


def test_side_stream_feeder_waits_before_use_and_records_the_stream():
    with FakeDevice() as dev:
        host = host_batches()
        feed(SideStreamFeeder(dev, host), host, steps=2)
    calls = [e for e in dev.log if e[0] in ("copy", "wait", "record_stream")]
    # the first call: copy batch 0 and prefetch batch 1 on the side stream, then the compute stream
    # waits and records
    assert calls[:6] == [
        ("copy", "side1"),
        ("copy", "side1"),
        ("wait", "default", "side1"),
        ("record_stream", "default"),
        ("record_stream", "default"),
        ("copy", "side1"),
    ]
    assert dev.counts["cross_stream_uses"] > 0


def test_missing_record_stream_is_caught():
    with pytest.raises(StreamRuleError, match="freed without record_stream\\(default\\)"):
        with FakeDevice() as dev:
            host = host_batches()
            feed(NoRecordStream(dev, host), host)


def test_missing_wait_is_caught():
    with pytest.raises(
        StreamRuleError, match="without waiting for it \\(default.wait_stream\\(side1\\)"
    ):
        with FakeDevice() as dev:
            host = host_batches()
            feed(NoWait(dev, host), host)


def test_non_blocking_copy_on_the_compute_stream_needs_no_wait():
    with FakeDevice() as dev:
        host = host_batches()
        assert feed(NonBlockingFeeder(dev), host) == [0, 1, 2, 3]
    assert dev.counts["waits"] == 0 and dev.counts["blocking_copies"] == 0


@pytest.mark.parametrize(
    "sync",
    [
        lambda dev, x: x.sum().item(),
        lambda dev, x: bool(x.sum() > 0),
        lambda dev, x: dev.synchronize(),
        lambda dev, x: dev.mark().synchronize(),
        lambda dev, x: dev.current_stream().synchronize(),
        lambda dev, x: dev.to_device(torch.ones(2), non_blocking=False),
    ],
    ids=["item", "bool", "synchronize", "event", "stream", "blocking_copy"],
)
def test_a_sync_inside_the_window_is_caught(sync):
    with FakeDevice() as dev:
        x = dev.to_device(torch.ones(3), non_blocking=True)
        sync(dev, x)  # outside the window: allowed
        with pytest.raises(HostSyncError, match="inside the measured window"):
            with dev.window(strict=True):
                sync(dev, x)


def test_host_values_are_no_sync_and_blocking_copies_pass_a_lenient_window():
    with FakeDevice() as dev:
        with dev.window(strict=False):
            torch.ones(3).sum().item()  # a host tensor: DDP's reducer does this every step
            dev.to_device(torch.ones(2), non_blocking=False)  # h2d=blocking
    assert dev.counts["blocking_copies"] == 1


def test_window_strictness_follows_the_config():
    cfg = OmegaConf.create(
        {
            "h2d": "side_stream",
            "sync": "ddp",
            "warmup_steps": 2,
            "optim": {"name": "powersgd", "warm_start": False, "start_iter": 2},
        }
    )
    strict, because = window_sync_check(cfg, "nccl", "cuda")
    assert not strict and "PowerSGD copies CPU torch.randn" in because
    cfg.optim.warm_start = True
    strict, because = window_sync_check(
        cfg, "nccl", "cuda"
    )  # its first compressed step is the first measured one
    assert not strict and "warmup_steps=3 keeps that out of the window" in because
    cfg.warmup_steps = (
        3  # PowerSGD's own torch.cuda.synchronize stays: named, never called checked (issue 19.4)
    )
    strict, because = window_sync_check(cfg, "nccl", "cuda")
    assert not strict and because.startswith(
        "optim=powersgd: torch's PowerSGD hook calls torch.cuda.synchronize"
    )
    cfg.optim.name = "bf16"
    assert window_sync_check(cfg, "nccl", "cuda") == (True, None)
    assert (
        window_sync_check(cfg, "gloo", "cuda")[0] is False
        and window_sync_check(cfg, "gloo", "fake")[0] is True
    )
    cfg.h2d = "blocking"
    assert window_sync_check(cfg, "nccl", "cuda")[0] is False


def test_captured_step_replays_eagerly_and_forbids_syncs():
    with FakeDevice() as dev:
        w = dev.to_device(torch.zeros(2), non_blocking=True)

        def step():
            w.add_(1)
            return w.sum()

        graph = dev.capture(step)
        out = graph.output
        assert (
            float(out) == 2.0
        )  # the fake runs the step at capture (a real capture only records it)
        graph.replay()
        graph.replay()
        assert float(out) == 6.0 and [e[0] for e in dev.log].count("replay") == 2
        with pytest.raises(HostSyncError, match="inside a graph capture"):
            dev.capture(lambda: w.sum().item())


def test_phase_timer_on_the_fake_uses_host_clock_events_and_keeps_only_entered_phases():
    with FakeDevice() as dev:
        timer = PhaseTimer(dev)
        timer.start_step()
        with timer.phase("data"):
            pass
        with timer.phase("graph_replay"):
            torch.ones(3).sum()
        (d,) = timer.durations()
    assert set(d) == {"data", "graph_replay", "step"} and d["step"] >= d["graph_replay"] >= 0
    assert dev.counts["events"] == 3


def test_make_feeder_copies_on_the_fake_and_not_on_cpu():
    assert make_feeder("side_stream", device_layer.Device(), iter([])).copies is False
    with FakeDevice() as dev:
        assert isinstance(make_feeder("side_stream", dev, iter([])), SideStreamFeeder)


def ddp_cfg(**over):
    cfg = {
        "optim": {"name": "none"},
        "cuda_graphs": True,
        "bucket": 25,
        "ddp": {
            "static_graph": False,
            "broadcast_buffers": True,
            "gradient_as_bucket_view": False,
            "find_unused_parameters": False,
        },
    }
    cfg.update(over)
    return OmegaConf.create(cfg)


def test_ddp_built_on_a_side_stream_is_joined_before_the_first_forward(one_rank_group, monkeypatch):
    """Defect 8: DDP's parameter broadcast, queued on the side stream it is built under, raced the
    first forward."""
    from tasks.train.ddp import DDPSync

    monkeypatch.setattr(
        device_layer, "_opened", None
    )  # this process's device layer is the test's, then none again
    dev = device_layer.open_device(Placement("fake", None, "gloo", "test"))
    try:
        model = dev.model_to_device(nn.Linear(4, 2))
        sync = DDPSync(ddp_cfg(), model, dev.torch_device)
        built = [e for e in dev.log if e[0] in ("use", "wait")]
        assert built == [("use", "side1"), ("use", "default"), ("wait", "default", "side1")]
        sync.model(dev.to_device(torch.ones(3, 4), non_blocking=True)).sum().backward()
    finally:
        dev.deactivate()


def test_the_fake_catches_ddp_built_on_a_side_stream_without_the_join(one_rank_group):
    from torch.nn.parallel import DistributedDataParallel as DDP

    with FakeDevice() as dev:
        model = dev.model_to_device(nn.Linear(4, 2))
        with dev.use_stream(dev.new_stream()):
            ddp = DDP(model, static_graph=True)
        with pytest.raises(StreamRuleError, match="written on stream side1 without waiting"):
            ddp(dev.to_device(torch.ones(3, 4), non_blocking=True))


def _syncs_the_device(state, bucket):
    """A comm hook written as torch's PowerSGD decompression is: a device-wide sync when CUDA is
    there."""
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    return bucket


def test_a_device_sync_in_a_comm_hook_is_flagged():
    """torch.cuda.synchronize() is invisible to set_sync_debug_mode and, on CPU, never even called
    (is_available() is False): the fake routes a hook's torch.cuda to itself, counts the sync, and
    refuses it in a strict window."""
    with FakeDevice() as dev:
        hook = dev.comm_hook(_syncs_the_device)
        assert hook.__qualname__ == _syncs_the_device.__qualname__ and hook(None, 1) == 1
        with dev.window(
            strict=False
        ):  # a config that names the sync (window_unchecked_because): counted
            hook(None, 2)
        with pytest.raises(HostSyncError, match="comm hook inside the measured window"):
            with dev.window(strict=True):
                hook(None, 3)
    assert dev.report()["comm_hook_device_syncs"] == 3


def test_powersgd_synchronises_the_device_in_every_bucket_and_the_fake_sees_it(
    one_rank_group, monkeypatch
):
    from tasks.train.ddp import DDPSync

    monkeypatch.setattr(device_layer, "_opened", None)
    dev = device_layer.open_device(Placement("fake", None, "gloo", "test"))
    try:
        model = dev.model_to_device(nn.Sequential(nn.Linear(16, 16), nn.Linear(16, 4)))
        powersgd = {
            "_target_": "tasks.train.hooks.powersgd",
            "name": "powersgd",
            "rank": 1,
            "start_iter": 2,
            "min_compression_rate": 0.0,
            "use_error_feedback": True,
            "warm_start": True,
            "batch_tensors_with_same_shape": False,
            "orthogonalization_epsilon": 0.0,
            "random_seed": 0,
            "batched": False,
        }
        sync = DDPSync(ddp_cfg(optim=powersgd, cuda_graphs=False), model, dev.torch_device)
        for _ in range(4):
            sync.model(dev.to_device(torch.ones(3, 16), non_blocking=True)).sum().backward()
    finally:
        dev.deactivate()
    assert (
        sync.hook.calls == 4 and dev.report()["comm_hook_device_syncs"] >= 2
    )  # every compressed step syncs
