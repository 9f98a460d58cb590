"""device=fake (tests only): CPU tensors run through the CUDA code paths of the step loop, the H2D
feeders and CUDA graphs, and the stream rules a real GPU would silently break are enforced.

torch's own torch.Stream / torch.Event cannot stand in on CPU (CPU events cannot record), so this
device keeps its own books: every tensor operation passes through a TorchDispatchMode that knows
which fake stream is current, and each storage remembers the stream that allocated it, its last
write (stream, sequence number) and the streams that used it. A broken rule raises StreamRuleError
(a missing wait or record_stream) or HostSyncError (a sync inside the measured window or a
capture); the rules one by one are in docs/device.md "Rules of the fake device". Streams are no-ops
for the data (one CPU does the work in program order); they record the order of the calls in
`log`, which tests read. Events read the host clock. Host tensors are told apart from device memory
by what they were computed from: see _Memory.
"""

from __future__ import annotations

import time
import types
import weakref
from collections import Counter
from contextlib import contextmanager
from dataclasses import dataclass, field

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from device.cpu import Device

aten = torch.ops.aten
HOST_SYNC_OPS = {
    aten._local_scalar_dense.default,
    aten.nonzero.default,
    aten.equal.default,
    aten.masked_select.default,
    aten.unique_consecutive.default,
    aten._unique2.default,
}


class StreamRuleError(AssertionError):
    """A use of a tensor that would race on a real GPU."""


class HostSyncError(AssertionError):
    """A host synchronisation where none is allowed (inside the measured window or a capture)."""


class FakeStream:
    def __init__(self, device: "FakeDevice", name: str):
        self.device, self.name = device, name

    def wait_stream(self, other: "FakeStream") -> None:
        self.device._wait(self, other)

    def synchronize(self) -> None:
        self.device._host_sync(f"{self.name}.synchronize()", stream=self)

    def __repr__(self) -> str:
        return f"<fake stream {self.name}>"


class FakeEvent:
    """A mark on the host clock, recorded on a fake stream."""

    def __init__(self, device: "FakeDevice", stream: FakeStream):
        self.device, self.stream, self.t = device, stream, time.perf_counter()
        self.seq = device._tick()

    def synchronize(self) -> None:
        self.device._host_sync("Event.synchronize()", stream=self.stream, upto=self.seq)


class FakeGraph:
    def __init__(self, device: "FakeDevice", step, output):
        self.device, self.step, self.output = device, step, output

    def replay(self):
        with self.device._no_sync("a captured step"):
            fresh = self.step()
        for static, new in zip(_tensors(self.output), _tensors(fresh)):
            static.copy_(new)
        self.device.log.append(("replay", self.device.current.name))
        return self.output


@dataclass
class _Memory:
    """What the fake knows about one storage. Only device memory follows the stream rules: memory
    handed over by to_device or model_to_device, and whatever an operation computes from it (host
    memory, such as the loader's batches or DDP's host-side bookkeeping, has no stream order)."""

    alloc: FakeStream
    what: str
    device: bool = False
    write: tuple[FakeStream, int] | None = None
    reads: dict = field(default_factory=dict)  # stream -> seq of its last read
    used_on: dict = field(default_factory=dict)  # stream -> seq of its last use (read or write)
    recorded: set = field(default_factory=set)  # streams passed to record_stream


class _Rules(TorchDispatchMode):
    def __init__(self, device: "FakeDevice"):
        super().__init__()
        self.device = device

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        return self.device._op(func, args, kwargs or {})


class FakeDevice(Device):
    kind = "fake"
    copies = True
    pins_memory = False  # pinning needs CUDA; the loader's pin thread is not modelled

    def __init__(self):
        self.default = FakeStream(self, "default")
        self.current = self.default
        self.streams = [self.default]
        self.log: list[tuple] = []
        self.counts: Counter = Counter()
        self.seq = 0
        self.fence = 0  # seq of the last device synchronisation
        self.done: dict = {}  # stream -> seq up to which the host saw it complete
        self.waited: dict = {self.default: {}}  # stream -> {stream it waited on: seq waited up to}
        self.memory: dict[int, _Memory] = {}  # storage (its StorageImpl address) -> what is known
        self.hazards: list[tuple] = []  # (alloc stream, user stream, seq of use, message)
        self.no_sync_reason: str | None = None
        self.blocking_copies_allowed = True
        self.strict = False  # the open window makes every host sync an error
        self._mode = _Rules(self)
        self._active = False

    # ----------------------------------------------------------------------------------- activation
    def activate(self) -> "FakeDevice":
        """Start enforcing (from now on, in this thread and autograd's); ranks stay activated until
        they exit."""
        if not self._active:
            self._mode.__enter__()
            self._active = True
        return self

    def deactivate(self) -> None:
        if self._active:
            self._mode.__exit__(None, None, None)
            self._active = False

    def __enter__(self):
        return self.activate()

    def __exit__(self, *exc):
        if exc[0] is None:
            self.deactivate()
        else:
            self._mode.__exit__(*exc)
            self._active = False
        return False

    # -------------------------------------------------------------------------------- the interface
    def new_stream(self) -> FakeStream:
        s = FakeStream(self, f"side{len(self.streams)}")
        self.streams.append(s)
        self.waited[s] = {}
        self.log.append(("new_stream", s.name))
        return s

    def current_stream(self) -> FakeStream:
        return self.current

    @contextmanager
    def use_stream(self, stream: FakeStream):
        before, self.current = self.current, stream
        self.log.append(("use", stream.name))
        try:
            yield
        finally:
            self.current = before
            self.log.append(("use", before.name))

    def record_stream(self, tensor, stream: FakeStream) -> None:
        mem = self._memory(tensor, create=True)
        if mem is not None:  # None: an empty tensor, no memory to protect
            mem.recorded.add(stream)
        self.counts["record_stream"] += 1
        self.log.append(("record_stream", stream.name))

    def to_device(self, tensor, non_blocking: bool):
        """A copy (CPU to CPU here), allocated and written on the current stream like a real H2D
        copy."""
        if not non_blocking:
            self.counts["blocking_copies"] += 1
            if not self.blocking_copies_allowed:
                self._host_sync(
                    "a blocking host-to-device copy (non_blocking=False)", stream=self.current
                )
        self.counts["copies"] += 1
        self.log.append(("copy", self.current.name))
        copy = tensor.clone()
        mem = self._memory(copy, new=True)
        if mem is not None:
            mem.device = True
        return copy

    def is_transfer(self, src, out) -> bool:
        """A script's `.to(device, copy=True)` of a host batch, device memory from then on: the
        fake's stand-in for its `.to("cuda")` (the same device type here), counted as a copy on the
        current stream."""
        if out is src or out.dtype != src.dtype or out.data_ptr() == src.data_ptr():
            return False
        self.counts["copies"] += 1
        self.log.append(("copy", self.current.name))
        mem = self._memory(out, new=True)
        if mem is not None:
            mem.device = True
        return True

    def model_to_device(self, model):
        """The model's parameters and buffers become device memory (on a GPU: model.to(device),
        blocking copies that the host waits for on the current stream)."""
        for t in [*model.parameters(), *model.buffers()]:
            mem = self._memory(t, create=True)
            if mem is not None:
                mem.device = True
        self.done[self.current] = self._tick()
        return model

    def mark(self) -> FakeEvent:
        self.counts["events"] += 1
        return FakeEvent(self, self.current)

    def seconds(self, start: FakeEvent, end: FakeEvent) -> float:
        return end.t - start.t

    def synchronize(self) -> None:
        self._host_sync("synchronize()")

    def capture(self, step) -> FakeGraph:
        self.synchronize()  # torch.cuda.graph synchronises before it captures
        self.log.append(("capture", self.current.name))
        with self._no_sync("a graph capture"):
            output = step()
        self.fence = self.seq  # a real capture queues nothing: no work of it is pending afterwards
        return FakeGraph(self, step, output)

    @contextmanager
    def window(self, strict: bool):
        allowed, self.blocking_copies_allowed = self.blocking_copies_allowed, not strict
        before, self.strict = self.strict, strict
        self.log.append(("window", "open"))
        try:
            with self._no_sync("the measured window"):
                yield
        finally:
            self.blocking_copies_allowed, self.strict = allowed, before
            self.log.append(("window", "closed"))

    def window_check(self, strict: bool) -> str:
        return "error" if strict else "error, blocking copies and comm-hook device syncs allowed"

    def comm_hook(self, hook):
        """The hook with its own torch.cuda calls routed here (a copy of the function whose global
        `torch` sees this device as torch.cuda): torch's hooks guard their device syncs with
        torch.cuda.is_available(), which a CPU run would otherwise never pass. The callbacks a hook
        chains (PowerSGD's decompression) share its globals. A hook that is not a plain function (a
        partial, a callable object) runs as it is."""
        if not isinstance(hook, types.FunctionType):
            return hook
        view = _TorchOnThisDevice(_HookCuda(self))
        routed = types.FunctionType(
            hook.__code__,
            {**hook.__globals__, "torch": view},
            hook.__name__,
            hook.__defaults__,
            hook.__closure__,
        )
        for attr in ("__kwdefaults__", "__qualname__", "__doc__", "__module__"):
            setattr(routed, attr, getattr(hook, attr))
        return routed

    def name(self) -> str:
        return "fake device (CPU)"

    def report(self) -> dict:
        return {
            "kind": self.kind,
            "streams": len(self.streams),
            "checked_ops": self.counts["ops"],
            "cross_stream_uses": self.counts["cross_stream_uses"],
            "waits": self.counts["waits"],
            "record_streams": self.counts["record_stream"],
            "copies": self.counts["copies"],
            "blocking_copies": self.counts["blocking_copies"],
            "replays": sum(1 for e in self.log if e[0] == "replay"),
            "comm_hook_device_syncs": self.counts["comm_hook_device_syncs"],
            "freed_without_record_stream": len(self.hazards),
        }

    # ------------------------------------------------------------------------------------ the rules
    def _tick(self) -> int:
        self.seq += 1
        return self.seq

    def _wait(self, waiter: FakeStream, other: FakeStream) -> None:
        """waiter.wait_stream(other): everything queued on `other` so far, and all it waited on,
        comes first."""
        now = self._tick()
        mine = self.waited[waiter]
        for s, upto in self.waited[other].items():
            mine[s] = max(mine.get(s, 0), upto)
        mine[other] = now
        self.counts["waits"] += 1
        self.log.append(("wait", waiter.name, other.name))

    def _ordered(self, later: FakeStream, earlier: FakeStream, seq: int) -> bool:
        """Is work on `later` queued now ordered after `earlier`'s work up to `seq`?"""
        return (
            later is earlier
            or seq <= self.fence
            or seq <= self.done.get(earlier, 0)
            or self.waited[later].get(earlier, 0) >= seq
        )

    def _host_sync(
        self, what: str, stream: FakeStream | None = None, upto: int | None = None
    ) -> None:
        """The host waits for `stream` (None: the whole device), up to `upto` (None: all queued so
        far)."""
        if self.no_sync_reason:
            raise HostSyncError(
                f"{what} inside {self.no_sync_reason}: on a GPU the host would wait for the device "
                "there (a sync the numbers would silently include)."
            )
        if stream is None:
            self.fence = self._tick()
        else:
            self.done[stream] = max(
                self.done.get(stream, 0), upto if upto is not None else self._tick()
            )
        self.counts["syncs"] += 1
        self.log.append(("sync", what))

    def _hook_device_sync(self) -> None:
        """torch.cuda.synchronize() from inside a comm hook (possibly on the backend's callback
        thread): the whole device waits. Counted always; an error in a strict window; elsewhere a
        device sync like synchronize()."""
        self.counts["comm_hook_device_syncs"] += 1
        if self.no_sync_reason and self.strict:
            raise HostSyncError(
                "torch.cuda.synchronize() called from a DDP comm hook inside "
                f"{self.no_sync_reason}: "
                "on a GPU every bucket's hook would wait for the whole device there."
            )
        self.fence = self._tick()
        self.counts["syncs"] += 1
        self.log.append(("sync", "torch.cuda.synchronize() in a comm hook"))

    @contextmanager
    def _no_sync(self, reason: str):
        before, self.no_sync_reason = self.no_sync_reason, reason
        try:
            yield
        finally:
            self.no_sync_reason = before

    def _memory(self, t: torch.Tensor, create: bool = False, new: bool = False) -> _Memory | None:
        """The books of t's storage. create: start them if missing; new: t was just allocated on the
        current stream (memory first seen otherwise was allocated before the books began, on the
        default stream). The storage's Python object lives exactly as long as the memory (torch
        keeps it while any tensor, saved or not, uses it), so a finalizer on it sees the real
        free."""
        try:
            storage = t.untyped_storage()
        except (RuntimeError, NotImplementedError):
            return None
        if not storage.nbytes():
            return None
        key = storage._cdata
        mem = self.memory.get(key)
        if mem is None and (create or new):
            mem = self.memory[key] = _Memory(
                self.current if new else self.default,
                f"{tuple(t.shape)} {str(t.dtype).removeprefix('torch.')}",
            )
            weakref.finalize(storage, self._released, key)
        return mem

    def _released(self, key: int) -> None:
        mem = self.memory.pop(key, None)
        if mem is None or not mem.device:
            return
        for stream, seq in mem.used_on.items():
            if (
                stream is mem.alloc
                or stream in mem.recorded
                or self._ordered(mem.alloc, stream, seq)
            ):
                continue
            self.hazards.append(
                (
                    mem.alloc,
                    stream,
                    seq,
                    (
                        f"tensor {mem.what} allocated on stream {mem.alloc.name} was used on "
                        "stream "
                        f"{stream.name} and freed without record_stream({stream.name}); new work "
                        "on "
                        f"{mem.alloc.name} may be handed its memory while "
                        f"{stream.name} still uses it"
                    ),
                )
            )

    def _check_reuse(self, stream: FakeStream) -> None:
        """Work is about to be queued on `stream`: memory it allocated and freed while another
        stream may still use it is a race now, unless that use is ordered before this work."""
        pending = []
        for alloc, user, seq, message in self.hazards:
            if self._ordered(alloc, user, seq):
                continue
            if alloc is stream:
                self.hazards = pending + [h for h in self.hazards if h[0] is not stream]
                raise StreamRuleError(message + ".")
            pending.append((alloc, user, seq, message))
        self.hazards = pending

    def _op(self, func, args, kwargs):
        if self.hazards:
            self._check_reuse(self.current)
        stream = self.current
        written = _written(func, args, kwargs)
        used = [(t, self._memory(t, create=t in written)) for t in _tensors((args, kwargs))]
        on_device = any(mem is not None and mem.device for _, mem in used)
        self.counts["ops"] += 1
        if func.is_view:  # an alias: no memory is touched
            return func(*args, **kwargs)
        for t, mem in used:
            if mem is not None and mem.device:
                self._check_use(func, mem, stream, write=t in written)
        out = func(*args, **kwargs)
        seq = self._tick()
        for t, mem in used:
            if mem is None:
                continue
            mem.used_on[stream] = seq
            if t in written:
                mem.write = (stream, seq)
                mem.device |= on_device
            else:
                mem.reads[stream] = seq
        for t in _tensors(out):
            mem = self._memory(t, new=True)
            if mem is not None and mem.write is None:
                mem.write = (stream, seq)
                mem.used_on[stream] = seq
                mem.device = on_device
        if (
            on_device and func in HOST_SYNC_OPS
        ):  # the host waits for this stream, this operation included
            self._host_sync(
                f"{func} (.item() / bool(tensor) / nonzero: the host reads a device value)",
                stream=stream,
                upto=seq,
            )
        return out

    def _check_use(self, func, mem: _Memory, stream: FakeStream, write: bool) -> None:
        if mem.write is not None:
            other, seq = mem.write
            if other is not stream:
                self.counts["cross_stream_uses"] += 1
            if not self._ordered(stream, other, seq):
                raise StreamRuleError(
                    f"{func} on stream {stream.name} uses tensor {mem.what} written on stream "
                    f"{other.name} without "
                    f"waiting for it ({stream.name}.wait_stream({other.name}) must come between): "
                    "on a GPU it would "
                    "read the memory before the write lands."
                )
        if write:
            for other, seq in mem.reads.items():
                if not self._ordered(stream, other, seq):
                    raise StreamRuleError(
                        f"{func} on stream {stream.name} overwrites tensor {mem.what} that stream "
                        f"{other.name} reads, "
                        f"without waiting for {other.name}: on a GPU the read could see the new "
                        "values."
                    )


class _HookCuda:
    """torch.cuda as a comm hook on the fake device sees it: a GPU is there, and synchronize() waits
    for it."""

    def __init__(self, device: FakeDevice):
        self._device = device

    def is_available(self) -> bool:
        return True

    def synchronize(self, device=None) -> None:
        self._device._hook_device_sync()

    def __getattr__(self, name):
        return getattr(torch.cuda, name)


class _TorchOnThisDevice:
    """torch, except that torch.cuda is the fake's (_HookCuda)."""

    def __init__(self, cuda: _HookCuda):
        self.cuda = cuda

    def __getattr__(self, name):
        return getattr(torch, name)


def _tensors(obj):
    """The tensors in an operation's arguments or outputs (nested tuples, lists and dicts)."""
    if isinstance(obj, torch.Tensor):
        yield obj
    elif isinstance(obj, (tuple, list)):
        for o in obj:
            yield from _tensors(o)
    elif isinstance(obj, dict):
        for o in obj.values():
            yield from _tensors(o)


class _Ids(set):
    """Tensors by identity (a tensor's == is elementwise)."""

    def __init__(self, tensors):
        super().__init__(map(id, tensors))

    def __contains__(self, t) -> bool:
        return super().__contains__(id(t))


_WRITES: dict = {}  # op -> [(position, name, kwarg_only)] of its `Tensor(a!)` arguments


def _written(func, args, kwargs) -> _Ids:
    """The tensors an operation writes in place (its schema's `Tensor(a!)` arguments, `out=`
    included)."""
    spots = _WRITES.get(func)
    if spots is None:
        spots = _WRITES[func] = [
            (i, a.name, a.kwarg_only)
            for i, a in enumerate(func._schema.arguments)
            if a.alias_info is not None and a.alias_info.is_write
        ]
    out = []
    for i, name, kwarg_only in spots:
        value = args[i] if i < len(args) and not kwarg_only else kwargs.get(name)
        out += list(_tensors(value))
    return _Ids(out)
