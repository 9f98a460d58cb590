"""What task=script measures inside the user's script without a line of it changed: PyTorch's
public hooks, installed before the script runs and removed after it.

The optimizer step hooks end a training step and time the optimizer phase; DDP's __init__ is
wrapped so the knobs apply to the script's own DDP (and are recorded); forward hooks, a hook on the
output's gradient and autograd's final callbacks split forward, backward compute and the exposed
sync; a comm hook around the script's own times each bucket; the DataLoader iterator's __next__ and
Tensor.to / .cuda give the data and h2d phases. Each hook, and what it does not see:
docs/script.md "What is measured, and how". Marks are the device's (CUDA events on a GPU, the host
clock on CPU), read after the window; nothing here synchronises the device or issues a collective.
`script.max_steps` stops every rank between two steps by raising Stop, a BaseException the
script's own `except Exception` does not catch: no collective is in flight then.
"""

from __future__ import annotations

import bisect
import functools
import gc
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import dataloader

from device import Clock
from tasks.train.ddp import serialized
from tasks.train.stragglers import cpu_usage


class Stop(BaseException):
    """script.max_steps reached: every rank leaves the script here (tasks/script/runner.py ends the
    run as finished)."""


class Step:
    """One optimizer step's marks: (phase, start, end) spans and the communication of its
    buckets."""

    __slots__ = (
        "start",
        "end",
        "spans",
        "comm",
        "index",
        "samples",
        "own0",
        "tool_s",
        "substituted_s",
        "collective_s",
        "gc0",
        "gc_s",
    )

    def __init__(self, index: int, start, own0: float = 0.0, gc0: float = 0.0):
        self.index, self.start, self.end, self.spans, self.comm = index, start, None, [], []
        # the collector's host seconds in this process when the step began, and over the step
        self.gc0, self.gc_s = gc0, None
        # the tool's own host seconds in its hooks when the step began, and over the step
        self.own0, self.tool_s = own0, None
        self.substituted_s = 0.0  # host seconds in the all-reduce the tool put in DDP's place
        # of which this thread's CPU seconds in the process group's allreduce call itself: the
        # call DDP's built-in makes the same (from C++), so not the substitution's cost
        # (tasks/script/cost.py's micro route)
        self.collective_s = 0.0
        self.samples = (
            0  # the batch's first dimension, summed over the step's forwards with gradients
        )


class Attach:
    """Installed in one rank for the script's run. warmup: steps skipped; steps: steps measured
    after them; max_steps: where every rank stops (None: the script's own end).

    The attach cost's budget is 2% of a step (0.24 ms of a 12 ms CPU step), so the hooks read the
    clock, append a tuple and leave: no closure wrapped per call, no pytree walk where the batch or
    the output is a tensor or a flat tuple of them, no attribute set on the module (nn.Module's
    __setattr__). Once the window is over (at the next forward with gradients or batch), what only
    times goes: the optimizer pre-hook and the loader's and Tensor.to's patches are removed, the
    DDP forward hooks return at once (removing a hook from a module torch.compile traced would
    recompile it); the script runs on with an optimizer-step counter, a forward that marks a step
    open (several optimizers in one iteration stay one step) and, with script.max_steps, the stop
    checks."""

    def __init__(self, cfg, device, rank: int, ours=None, progress: dict | None = None):
        """ours(): a context in which this project's modules are the ones imported
        (tasks/script/runner.py: while the script runs, its own `models`, `data`, ... are)."""
        from contextlib import nullcontext

        self.cfg, self.rank, self.ours = cfg, rank, ours or nullcontext
        self.progress = progress if progress is not None else {}  # what an interrupted run records
        self.clock = Clock(device)
        # the host clock itself on CPU: one call a mark, not three
        self.mark = time.perf_counter if self.clock.device.kind == "cpu" else self.clock.device.mark
        self.warmup, self.window = int(cfg.warmup_steps), int(cfg.steps)
        self.max_steps = cfg.script.max_steps
        self.steps_done = 0  # optimizer steps the script took (each rank counts its own)
        self.open = False  # a forward with gradients since the last step's end
        self.measured: list[Step] = []  # the window's steps, in order
        self.current: Step | None = None  # the step being recorded (None outside the window)
        self.ddps: list[dict] = []  # each DDP the script built: what it asked for and what it got
        self.timed: list[TimedHook] = []  # their comm hooks (the bucket layout each saw)
        self.serialized = False
        self.cpu0 = self.cpu1 = None  # CPU readings at the window's ends (stragglers.cpu_usage)
        self.wall0 = self.wall1 = None
        self._undo: list = []
        self._pending = set()  # modules inside a forward (a model wrapped twice nests them)
        self._fwd: dict[int, object] = {}  # id(DDP module) -> its forward's start mark
        self._batch: set[int] = set()  # ids of the host tensors of the window's last batch
        # id(DDP module) -> its TimedHook, for each DDP built with gradient_as_bucket_view=True:
        # a gradient kept between steps is its bucket view there, and the built-in divides it in
        # place where it multiplies the others (TimedHook.scale); empty otherwise (no cost)
        self._views: dict[int, TimedHook] = {}
        # the window's own hook and patches (removed once it is over)
        self._window_hooks: list = []
        self._window_patches: dict[str, object] = {}
        self.over = False  # the window is complete: its hooks go at the next forward or batch
        self.retired = False  # they are gone
        # host seconds spent in this module's hooks (the real calls they wrap left out), and in the
        # comm futures' callbacks (gloo's thread): the attach cost's micro route, per step
        self.own_s = self.own_thread_s = 0.0
        # host seconds in Python's garbage collector (gc.callbacks, until the window is over): a
        # full collection of the rank's heap is 0.1-0.4 s on the 2-core VM, so one inside a
        # 100-step window moves a step's CPU by milliseconds; the cost table reads it on both
        # sides (tasks/script/cost.py) to tell it from the hooks' own cost
        self.gc_s, self._gc_t = 0.0, 0.0

    # ---- life cycle
    def install(self) -> "Attach":
        from torch.optim.optimizer import (
            register_optimizer_step_post_hook,
            register_optimizer_step_pre_hook,
        )

        self._window_hooks.append(register_optimizer_step_pre_hook(self._opt_pre))
        self._undo.append(register_optimizer_step_post_hook(self._opt_post).remove)
        self._patch(DistributedDataParallel, "__init__", self._ddp_init)
        self._real_register = DistributedDataParallel.register_comm_hook
        self._patch(DistributedDataParallel, "register_comm_hook", self._register_comm_hook)
        self._patch(dataloader._BaseDataLoaderIter, "__next__", self._next, window=True)
        self._patch(torch.Tensor, "to", self._copy, window=True)
        self._patch(torch.Tensor, "cuda", self._copy, window=True)
        gc.callbacks.append(self._gc)
        self._window_patches["gc"] = lambda: gc.callbacks.remove(self._gc)
        if self.warmup == 0:
            self._begin_window(self.clock.mark())
        return self

    def uninstall(self) -> None:
        self._retire()
        while self._undo:
            self._undo.pop()()

    def _patch(self, owner, name: str, make, window: bool = False) -> None:
        real = getattr(owner, name)
        setattr(owner, name, make(real))

        def undo():
            setattr(owner, name, real)

        self._undo.append(undo)
        if window:
            self._window_patches[name] = undo

    def _retire(self) -> None:
        """The window is over: its timing hook and patches go (never while torch walks the
        optimizer's hooks: this runs from a DDP forward pre-hook or the loader's __next__)."""
        if self.retired:
            return
        self.retired, self.over = True, False
        self._pending.clear()
        while self._window_hooks:
            self._window_hooks.pop().remove()
        for name, undo in self._window_patches.items():
            if name != "__next__" or self.max_steps is None:  # the batch stop check stays
                undo()

    @property
    def in_window(self) -> bool:
        return self.current is not None

    # ---- the step boundary: the optimizer
    def _opt_pre(self, optimizer, args, kwargs) -> None:
        t = time.perf_counter()
        self._opt_start = self.mark() if self.current is not None or self._closing_last() else None
        self.own_s += time.perf_counter() - t

    def _closing_last(self) -> bool:
        return (
            bool(self.measured)
            and self.measured[-1].end is not None
            and not self.open
            and self.steps_done <= self.warmup + self.window
        )

    def _opt_post(self, optimizer, args, kwargs) -> None:
        if self.retired:  # after the window: the step count only
            if self.open:
                self.open = False
                self.steps_done += 1
            return
        t = time.perf_counter()
        end = self.mark()
        start = getattr(self, "_opt_start", None)
        if not self.open:  # another optimizer of the step just ended (or one stepped, no forward)
            if self.measured and self.measured[-1].index == self.steps_done and start is not None:
                last = self.measured[-1]
                last.spans.append(("optimizer", start, end))
                last.end = end
            self.own_s += time.perf_counter() - t
            return
        self.open = False
        self.steps_done += 1
        if self.steps_done <= self.warmup:
            self.progress["warmup_steps_done"] = self.steps_done
        elif self.steps_done <= self.warmup + self.window:
            self.progress["measured_steps_done"] = self.steps_done - self.warmup
        step = self.current
        if step is not None:
            if start is not None:
                step.spans.append(("optimizer", start, end))
            step.end = end
            for timed in self.timed:
                if timed.logged:
                    timed.read_logged(step)
            self.own_s += time.perf_counter() - t
            step.tool_s = self.own_s + self.own_thread_s - step.own0
            step.gc_s = self.gc_s - step.gc0
            self.measured.append(step)
            self.current = None
            if self.steps_done >= self.warmup + self.window:
                self._end_window()
            t = time.perf_counter()
        if self.warmup <= self.steps_done < self.warmup + self.window:
            self._begin_window(end)
        self.own_s += time.perf_counter() - t

    def _begin_window(self, start) -> None:
        if self.cpu0 is None:
            with self.ours():
                self.cpu0, self.wall0 = cpu_usage(), time.time()
        self.current = Step(self.steps_done + 1, start, self.own_s + self.own_thread_s, self.gc_s)

    def _end_window(self) -> None:
        with self.ours():
            self.cpu1, self.wall1 = cpu_usage(since=self.cpu0), time.time()
        self.over = True

    def _maybe_stop(self) -> None:
        if self.max_steps is not None and self.steps_done >= self.max_steps and not self.open:
            raise Stop(f"script.max_steps={self.max_steps} reached")

    def _gc(self, phase: str, info: dict) -> None:
        """gc.callbacks: the collector's time, whichever thread set it off (removed with the
        window's patches)."""
        if phase == "start":
            self._gc_t = time.perf_counter()
        else:
            self.gc_s += time.perf_counter() - self._gc_t

    # ---- data
    def _next(self, real):
        attach = self

        @functools.wraps(real)
        def __next__(it):
            attach._maybe_stop()
            step = attach.current
            if step is None:
                if attach.over:
                    attach._retire()
                return real(it)
            t0 = time.perf_counter()
            a = attach.mark()
            t1 = time.perf_counter()
            out = real(it)
            t2 = time.perf_counter()
            step.spans.append(("data", a, attach.mark()))
            attach._batch = host_tensor_ids(out)
            attach.own_s += time.perf_counter() - t2 + t1 - t0
            return out

        return __next__

    # ---- host-to-device copies of the loader's batch (where they can be seen: its tensors' .to /
    # .cuda)
    def _copy(self, real):
        attach = self

        @functools.wraps(real)
        def copy(t, *args, **kwargs):
            # inside torch.compile the original runs (is_compiling() folds to True: no guard on the
            # tool)
            if (
                torch.compiler.is_compiling()
                or attach.current is None
                or id(t) not in attach._batch
            ):
                return real(t, *args, **kwargs)
            t0 = time.perf_counter()
            step, a = attach.current, attach.mark()
            t1 = time.perf_counter()
            out = real(t, *args, **kwargs)
            t2 = time.perf_counter()
            if attach.clock.device.is_transfer(t, out):
                step.spans.append(("h2d", a, attach.mark()))
            attach.own_s += time.perf_counter() - t2 + t1 - t0
            return out

        return copy

    # ---- DDP: knobs, hooks
    def _ddp_init(self, real):
        attach = self

        @functools.wraps(real)
        def __init__(ddp, module, *args, **kwargs):
            asked = {
                k: kwargs.get(k)
                for k in ("bucket_cap_mb", "static_graph", "gradient_as_bucket_view")
            }
            kwargs.update(attach.knobs())
            real(ddp, module, *args, **kwargs)
            attach._instrument(ddp, asked, kwargs)

        return __init__

    def knobs(self) -> dict:
        """The DDP arguments the config sets on the script's DDP (nothing when left at their
        defaults)."""
        cfg, out = self.cfg, {}
        if cfg.bucket is not None:
            out["bucket_cap_mb"] = float(cfg.bucket)
        if cfg.ddp.static_graph:
            out["static_graph"] = True
        if cfg.ddp.gradient_as_bucket_view:
            out["gradient_as_bucket_view"] = True
        return out

    def _instrument(self, ddp, asked: dict, used: dict) -> None:
        info = {
            "asked": asked,
            "applied": self.knobs(),
            "bucket_cap_mb": used.get("bucket_cap_mb"),
            "static_graph": bool(used.get("static_graph")),
            "script_hook": None,
            "optim": self.cfg.optim.name,
            "parameters": sum(p.numel() for p in ddp.parameters() if p.requires_grad),
            "grad_bytes": sum(
                p.numel() * p.element_size() for p in ddp.parameters() if p.requires_grad
            ),
        }
        self.ddps.append(info)
        ddp.register_forward_pre_hook(self._forward_pre)
        ddp.register_forward_hook(self._forward_post)
        state, hook = self._config_hook(ddp)
        timed = TimedHook(self, state, hook, info, ddp)
        self.timed.append(timed)
        ddp._ddp_comm_timing = timed
        if self._logged_timing():
            # DDP's built-in all-reduce, its runtime stats read each step (TimedHook.read_logged)
            timed.substituted, timed.logged, timed.ddp = False, True, ddp
            info["comm_timing"] = "ddp_logging"
            ddp._set_ddp_runtime_logging_sample_rate(1)
            return
        info["comm_timing"] = "hook"
        if getattr(ddp, "gradient_as_bucket_view", False):
            self._views[id(ddp)] = timed
        self._real_register(ddp, timed, TimedHook.call)

    def _logged_timing(self) -> bool:
        """script.comm_timing=ddp_logging applies: no comm hook asked for (optim=) and the host
        clock (DDP's CPU timer stamps the wall clock; its CUDA timer keeps events of its own)."""
        return (
            self.cfg.script.get("comm_timing", "hook") == "ddp_logging"
            and not self.cfg.optim.get("_target_")
            and self.clock.device.kind == "cpu"
        )

    def _config_hook(self, ddp):
        """optim='s hook (conf/optim: its _target_ gives (state, hook)), else allreduce_hook: DDP's
        own sum / world size, through the hook path so that each bucket's start and end can be
        seen (TimedHook runs it with one future callback, not allreduce_hook's two)."""
        from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

        if self.cfg.optim.get("_target_"):
            with self.ours():
                from base.build import build
                from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook

                state, hook = build(self.cfg.optim)
            if isinstance(state, powerSGD_hook.PowerSGDState) and dist.get_backend() == "gloo":
                self.serialized = True  # as task=train's (tasks/train/ddp.py: serialized)
                return state, serialized(hook)
            return state, hook
        return ddp.process_group, default_hooks.allreduce_hook

    def _register_comm_hook(self, real):
        @functools.wraps(real)
        def register_comm_hook(ddp, state, hook):
            timed = getattr(ddp, "_ddp_comm_timing", None)
            if timed is None:
                return real(ddp, state, hook)
            name = getattr(hook, "__qualname__", repr(hook))
            timed.info["script_hook"] = name
            if self.cfg.optim.get(
                "_target_"
            ):  # optim= replaces the script's own hook: recorded, not silent
                timed.info["script_hook_replaced_by"] = self.cfg.optim.name
                return None
            timed.state, timed.hook, timed.substituted = state, hook, False
            if timed.logged:  # the script's own hook: timed around it, DDP's stats no longer read
                timed.logged = False
                timed.info["comm_timing"] = "hook"
                self._real_register(ddp, timed, TimedHook.call)
            return None

        return register_comm_hook

    def _forward_pre(self, module, args):
        self._maybe_stop()
        if self.retired:  # after the window: a step is open at a forward with gradients
            if torch.is_grad_enabled():
                self.open = True
            return
        t = time.perf_counter()
        grad = torch.is_grad_enabled()
        if grad:
            self.open = True
            if self.over:
                self._retire()
                return
        step = self.current
        # a forward without gradients (evaluation through the DDP module) is the script's own code:
        # outside
        if step is not None and grad:
            if not self._pending:
                first = args[0] if args and isinstance(args[0], torch.Tensor) else None
                if first is None or first.dim() == 0:
                    first = next(
                        (
                            x
                            for x in torch.utils._pytree.tree_leaves((args,))
                            if isinstance(x, torch.Tensor) and x.dim() > 0
                        ),
                        None,
                    )
                if first is not None and first.dim() > 0:
                    step.samples += int(first.shape[0])
            self._fwd[id(module)] = self.mark()
        self._pending.add(id(module))
        self.own_s += time.perf_counter() - t

    def _forward_post(self, module, args, output):
        if self._views and id(module) in self._views:
            t = time.perf_counter()
            self._views[id(module)].watch(output)
            self.own_s += time.perf_counter() - t
        if self.retired:
            return None
        t = time.perf_counter()
        self._pending.discard(id(module))
        step, start = self.current, self._fwd.pop(id(module), None)
        if step is not None and start is not None:
            step.spans.append(("forward", start, self.mark()))
            if not self._pending:  # the outermost DDP: its output's gradient starts backward
                first = (
                    output
                    if isinstance(output, torch.Tensor)
                    else next(
                        (
                            x
                            for x in torch.utils._pytree.tree_leaves(output)
                            if isinstance(x, torch.Tensor) and x.requires_grad
                        ),
                        None,
                    )
                )
                if first is not None and first.requires_grad:
                    first.register_hook(self._backward_start)
        self.own_s += time.perf_counter() - t
        return None

    def _backward_start(self, grad):
        t = time.perf_counter()
        step = self.current
        if step is None:
            return None
        a, mark = self.mark(), self.mark
        engine = torch.autograd.Variable._execution_engine

        def compute_done():  # before DDP's own final callback, queued later in this backward
            t0 = time.perf_counter()
            b = mark()
            step.spans.append(("backward", a, b))

            def sync_done():  # after DDP's: its wait for the all-reduces is the exposed comm
                t1 = time.perf_counter()
                step.spans.append(("sync", b, mark()))
                self.own_s += time.perf_counter() - t1

            engine.queue_callback(sync_done)
            self.own_s += time.perf_counter() - t0

        engine.queue_callback(compute_done)
        self.own_s += time.perf_counter() - t
        return None


def host_tensor_ids(batch) -> set[int]:
    """The ids of a loader batch's host tensors: a tensor or a flat tuple / list of them read
    directly, anything else through torch's pytree."""
    if isinstance(batch, torch.Tensor):
        leaves = (batch,)
    elif type(batch) in (tuple, list) and all(isinstance(t, torch.Tensor) for t in batch):
        leaves = batch
    else:
        leaves = torch.utils._pytree.tree_leaves(batch)
    return {id(t) for t in leaves if isinstance(t, torch.Tensor) and t.is_cpu}


def _first(fut):
    """allreduce_hook's result: the all-reduced bucket, the work's one tensor."""
    return fut.value()[0]


class TimedHook:
    """The one comm hook each DDP gets: the script's own (or optim='s, or allreduce_hook) inside,
    each bucket's start and end marked into the step in flight.

    Where the script asks for no hook, DDP's built-in (each gradient scaled by 1 / the world size,
    then the bucket all-reduced, in C++) is done here as the built-in does it (scale), with the
    process group's own allreduce and one future callback that both ends the bucket's mark and
    returns its tensor: allreduce_hook's own callback, and a second for the mark, would be two GIL
    round trips a bucket in gloo's thread."""

    def __init__(self, attach: Attach, state, hook, info: dict, ddp=None):
        self.attach, self.state, self.hook, self.info = attach, state, hook, info
        # DDP's own all-reduce, through a hook for the tool's sake (no hook asked for)
        self.substituted = not attach.cfg.optim.get("_target_")
        # the substituted all-reduce's group, its size and 1 / its size
        self._group = self._size = self._scale = None
        # with gradient_as_bucket_view=True: the data pointers, sorted, of the gradients that
        # were set when this DDP's last backward started (watch, record); a gradient kept from
        # the step before is its bucket view, so it points into its bucket's buffer
        self._kept: list[int] = []
        # (a bucket buffer's data pointer, its elements) -> how many parameters it holds: DDP
        # rebuilds its buckets once, into new buffers, so a buffer's pointer names its layout
        self._count: dict[tuple[int, int], int] = {}
        # the bucket layout the window saw: bucket index -> its parameters (indices into
        # self.grads); DDP rebuilds its buckets once, at the end of the first iteration, so steps 1
        # and 2 are read again
        self.layout: dict[int, list[int]] = {}
        named = (
            [(n, p) for n, p in ddp.module.named_parameters() if p.requires_grad]
            if ddp is not None
            else []
        )
        self.where = {id(p): i for i, (_, p) in enumerate(named)}
        # script.comm_timing=ddp_logging: no comm hook; the DDP whose runtime stats are read, the
        # last iteration read, and its bucket sizes (bytes) parsed from the stats' string
        self.logged, self.ddp, self._iteration, self._sizes = False, None, None, (None, [])
        self.params = [p for _, p in named]
        # the parameters' names, shapes and element sizes: the what-if model's sizes
        # (whatif/profile.py)
        self.grads = {
            "names": [n for n, _ in named],
            "shapes": [list(p.shape) for _, p in named],
            "numel": [p.numel() for _, p in named],
            "element_size": [p.element_size() for _, p in named],
        }

    def watch(self, output) -> None:
        """The DDP's forward returned output: where its gradient arrives (backward starts, before
        any parameter's gradient is accumulated), record which gradients are set. Only for a DDP
        built with gradient_as_bucket_view=True (Attach._views), in and out of the window."""
        if not self.substituted or not torch.is_grad_enabled():
            return
        first = (
            output
            if isinstance(output, torch.Tensor)
            else next(
                (
                    x
                    for x in torch.utils._pytree.tree_leaves(output)
                    if isinstance(x, torch.Tensor) and x.requires_grad
                ),
                None,
            )
        )
        if first is not None and first.requires_grad:
            first.register_hook(self.record)

    def record(self, grad):
        t = time.perf_counter()
        self._kept = sorted(g.data_ptr() for p in self.params if (g := p.grad) is not None)
        self.attach.own_s += time.perf_counter() - t

    def scale(self, bucket, buffer) -> None:
        """Each gradient of the bucket scaled by 1 / the world size as DDP's built-in scales it
        (reducer.cpp, mark_variable_ready_dense, with no comm hook): a gradient copied into the
        bucket is multiplied while it is copied in (`at::mul_out(bucket_view, grad, 1. /
        div_factor_)`); a gradient that already was its bucket view when the backward began
        (gradient_as_bucket_view=True, kept between steps by zero_grad(set_to_none=False) or
        through no_sync) is divided in place (`bucket_view.div_(div_factor_)`). x * float(1/3)
        and x / 3 differ in the last bit for some x, and the script's gradients must be the ones
        it gets alone (tests/test_script_substituted_allreduce.py). With a hook registered DDP
        copies without scaling, so this pass is the one the substitution adds; one rank: none.
        allreduce inlines the first case (no gradient set when the backward began: every run's
        per-bucket path without gradient_as_bucket_view)."""
        if self._size == 1:
            return
        # the gradients set at the backward's start that point into this bucket's buffer (live
        # tensors' storage does not overlap): each is its own parameter's bucket view
        lo, n = buffer.data_ptr(), buffer.numel()
        hi = lo + n * buffer.element_size()
        inside = bisect.bisect_left(self._kept, hi) - bisect.bisect_left(self._kept, lo)
        if not inside:  # all copied in
            buffer.mul_(self._scale)
            return
        key = (lo, n)
        if key not in self._count:
            self._count[key] = len(bucket.parameters())
        if inside == self._count[key]:
            buffer.div_(self._size)
            return
        kept = set(self._kept)  # a bucket that holds both: parameter by parameter
        for v in bucket.gradients():
            if v.data_ptr() in kept:
                v.div_(self._size)
            else:
                v.mul_(self._scale)

    def allreduce(self, bucket, step: Step | None = None):
        """DDP's built-in all-reduce of one bucket (scale, then the process group's allreduce),
        its future's value still the work's list; None for a complex bucket (allreduce_hook
        views it as real). The allreduce call is the built-in's own, its CPU time kept apart in
        step.collective_s."""
        buffer = bucket.buffer()
        if buffer.is_complex():
            return None
        if self._scale is None:
            group = self.state if self.state is not None else dist.group.WORLD
            self._group, self._size = group, group.size()
            self._scale = 1.0 / self._size
        if self._kept:  # gradient_as_bucket_view=True, gradients set when the backward began
            self.scale(bucket, buffer)
        elif self._size != 1:  # scale's first case, inline
            buffer.mul_(self._scale)
        if step is None:
            return self._group.allreduce([buffer]).get_future()
        # this thread's CPU in the call, not its wall time: a wait for a core or for the GIL
        # (the binding releases it) around the call is the substitution's, not the built-in's
        t = time.thread_time()
        work = self._group.allreduce([buffer])
        step.collective_s += time.thread_time() - t
        return work.get_future()

    def read_logged(self, step: Step) -> None:
        """script.comm_timing=ddp_logging, at the step's end: DDP's runtime stats for its last
        synchronised backward (reducer.cpp, sample rate 1: the comm start when its first bucket
        was ready, the comm end when finalize_backward had waited for every bucket; the host's
        wall clock in ns) put into the step as one entry per bucket, each with that start and end:
        the comm time and its overlap with backward compute per step, no bucket's own start
        (result.ready_series gives the what-if model none). DDP stores its stats at the next
        forward; set_runtime_stats_and_log stores them now (DDP's own average then counts this
        iteration twice), so the window's last step is read too."""
        logger = getattr(self.ddp, "logger", None)
        if logger is None:
            return
        logger.set_runtime_stats_and_log()
        d = self.ddp._get_ddp_logging_data()
        it = d.get("iteration")
        if it is None or it == self._iteration:  # no synchronised backward in this step
            return
        self._iteration = it
        a, b = d.get("backward_comm_time_start"), d.get("backward_comm_time_end")
        if not a or not b or b < a:
            return
        text = d.get("rebuilt_bucket_sizes") or d.get("bucket_sizes") or ""
        if text != self._sizes[0]:
            self._sizes = (text, [int(x) for x in str(text).split(",") if x.strip()])
        # the wall clock's ns onto the marks' clock (time.perf_counter on CPU)
        off = time.time() - time.perf_counter()
        start, end = a / 1e9 - off, b / 1e9 - off
        for i, nbytes in enumerate(self._sizes[1] or [0]):
            step.comm.append((start, end, nbytes, i, self))

    @staticmethod
    def call(timed: "TimedHook", bucket):
        attach = timed.attach
        step = attach.current
        if step is None:
            if timed.substituted:
                fut = timed.allreduce(bucket)
                if fut is not None:
                    return fut.then(_first)
            return timed.hook(timed.state, bucket)
        t0 = time.perf_counter()
        mark = attach.mark
        a = mark()
        buffer, index = bucket.buffer(), bucket.index()
        nbytes = buffer.numel() * buffer.element_size()
        if step.index <= 2 or index not in timed.layout:
            timed.layout[index] = [timed.where.get(id(p), -1) for p in bucket.parameters()]
        t1 = time.perf_counter()
        # the hook the script (or optim=) asked for is theirs, and left out; the all-reduce in
        # place of DDP's built-in is kept apart (substituted_s): the built-in does the same scaling
        # and all-reduce in C++, so this call bounds the substitution's cost
        raw = timed.allreduce(bucket, step) if timed.substituted else None
        fut = raw if raw is not None else timed.hook(timed.state, bucket)
        t2 = time.perf_counter()
        if timed.substituted:
            step.substituted_s += t2 - t1

        def done(f):
            t = time.perf_counter()
            step.comm.append((a, mark(), nbytes, index, timed))
            attach.own_thread_s += time.perf_counter() - t
            return f.value()[0] if raw is not None else f.value()

        out = fut.then(done)
        attach.own_s += time.perf_counter() - t2 + t1 - t0
        return out


def is_initialized() -> bool:
    return dist.is_available() and dist.is_initialized()
