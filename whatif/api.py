"""What the diagnosis, the autotune and the command call.

    predict(record, {"optim": "bf16"})            -> Prediction(step_s, lo, hi, samples_per_s,
    speedup, dominant, ...) predict_sweep(record, {"bucket": [25, 100]})  -> Sweep(profile, own,
    rows)

`record` is a run record (base.record.Record, or its JSON dict), a run directory or a record file. A
change uses the command line's words (bucket, optim, accumulate, sync, world_size, ddp.static_graph,
ddp.gradient_as_bucket_view, optim.rank, link). Every prediction's speed-up is against the model's
prediction of the run's own configuration (paired draws), so a model error common to both largely
cancels; the own prediction is also set beside the run's measured step."""

from __future__ import annotations

import itertools
from dataclasses import dataclass, replace
from pathlib import Path

from base.record import Record
from stats import time_saved
from whatif import links as lk
from whatif.profile import Profile, ProfileError, from_record, load_record
from whatif.quantity import Draws
from whatif.step import NOT_MODELLED, Config, Prediction, changed, predict as _predict

DEFAULT_SAMPLES = 1000


@dataclass
class Sweep:
    profile: Profile
    own: Prediction
    base: Config
    rows: list[Prediction]
    link: lk.Link | None

    @property
    def not_modelled(self) -> tuple[str, ...]:
        return NOT_MODELLED


def profile_of(record, model: str | None = None) -> Profile:
    """model: a conf/model name whose sizes stand in for the run's (python -m whatif --model)."""
    if isinstance(record, Profile):
        return record
    if isinstance(record, dict):
        record = Record.from_dict(record)
    if isinstance(record, Record):
        return from_record(record, record.job.output_dir or "", model)
    rec, path = load_record(record)
    return from_record(rec, path, model)


def link_from(link=None, nccl_tests=None, collectives=None) -> lk.Link | None:
    """One of: a preset name, a Link, an nccl-tests file (path or parsed dict), a task=collectives
    record/dir."""
    if nccl_tests is not None:
        from comm.nccl_tests import read

        parsed = read(nccl_tests) if isinstance(nccl_tests, (str, Path)) else nccl_tests
        return lk.from_nccl_tests(parsed)
    if collectives is not None:
        rec = (
            collectives
            if isinstance(collectives, Record)
            else (
                Record.from_dict(collectives)
                if isinstance(collectives, dict)
                else load_record(collectives)[0]
            )
        )
        if rec.task != "collectives":
            raise ProfileError(
                f"--collectives: that record is task={rec.task}, not task=collectives"
            )
        return lk.from_collectives(rec)
    if link is None or isinstance(link, lk.Link):
        return link
    return lk.preset(str(link))


def base_config(
    prof: Profile, link: lk.Link | None = None, world_size: int | None = None
) -> Config:
    cfg = Config.of(prof)
    if link is not None:
        cfg = replace(cfg, link=link, link_name=link.name)
    if world_size is not None:
        cfg = changed(cfg, {"world_size": world_size})
    return cfg


def predict(
    record,
    change: dict | None = None,
    *,
    link=None,
    nccl_tests=None,
    collectives=None,
    world_size: int | None = None,
    samples: int = DEFAULT_SAMPLES,
    seed: int = 0,
    timeline: bool = False,
) -> Prediction:
    return _own_and_changed(
        profile_of(record),
        change,
        link=link,
        nccl_tests=nccl_tests,
        collectives=collectives,
        world_size=world_size,
        samples=samples,
        seed=seed,
        timeline=timeline,
    )[1]


def _own_and_changed(
    prof: Profile,
    change: dict | None,
    *,
    link=None,
    nccl_tests=None,
    collectives=None,
    world_size: int | None = None,
    samples: int = DEFAULT_SAMPLES,
    seed: int = 0,
    timeline: bool = False,
) -> tuple[Prediction, Prediction]:
    """The run's own configuration and the changed one, predicted with the same draws (paired)."""
    the_link = link_from(link, nccl_tests, collectives)
    draws = Draws(samples, seed)
    own = _predict(prof, Config.of(prof), draws)
    cfg = changed(base_config(prof, the_link, world_size), change or {})
    return own, _predict(prof, cfg, draws, own=own, timeline=timeline)


def predict_sweep(
    record,
    grid: dict[str, list] | None = None,
    *,
    link=None,
    nccl_tests=None,
    collectives=None,
    world_size: int | None = None,
    samples: int = DEFAULT_SAMPLES,
    seed: int = 0,
) -> Sweep:
    """Every combination of the grid's values (the sweep's order: the last key varies fastest), each
    against the run's own configuration, each with its timeline."""
    prof = profile_of(record)
    the_link = link_from(link, nccl_tests, collectives)
    draws = Draws(samples, seed)
    own = _predict(prof, Config.of(prof), draws, timeline=True)
    base = base_config(prof, the_link, world_size)
    keys = list((grid or {}).keys())
    combos = list(itertools.product(*[list(grid[k]) for k in keys])) if keys else [()]
    rows, seen = [], set()
    for values in combos:
        cfg = changed(base, dict(zip(keys, values)))
        if cfg in seen:
            continue
        seen.add(cfg)
        rows.append(_predict(prof, cfg, draws, own=own, timeline=True))
    for r in rows:
        r.label = r.config.label(Config.of(prof))
    return Sweep(prof, own, base, rows, the_link)


def parse_grid(items: list[str]) -> dict[str, list[str]]:
    """["bucket=25,100", "optim=none,bf16"] -> {"bucket": ["25", "100"], "optim": ["none",
    "bf16"]}."""
    grid: dict[str, list[str]] = {}
    for item in items:
        if "=" not in item:
            raise ValueError(f"--sweep {item!r}: write key=v1,v2 (e.g. bucket=25,100,2000)")
        k, v = item.split("=", 1)
        values = [x for x in v.split(",") if x.strip()]
        if not values:
            raise ValueError(f"--sweep {item!r}: no values")
        grid[k.strip()] = values
    return grid


def saving(record, change: dict, **kw) -> dict:
    """What a change saves per sample, for the diagnosis's "estimated saving": 1 - 1/speed-up, with
    its interval (the typical speed-up's), the prediction's dominant part and how it was computed.
    Where the model's step of the run's own configuration misses the measured step (outside its
    prediction interval), the range also holds the two ends of that unexplained time
    (unexplained_range)."""
    prof = profile_of(record)
    own, p = _own_and_changed(prof, change, **kw)
    out = {
        **_saved(p),
        "of": "time per sample",
        "dominant": p.dominant,
        "prediction": p,
        "how": f"the what-if model ({p.label}): predicted samples/s against the run's own "
        "configuration",
    }
    if out["fraction"] is not None and out["lo"] is not None and out["hi"] is not None:
        wide = unexplained_range(prof.step, own, p)
        if wide is not None:
            a, b, gap = wide
            out["lo"], out["hi"] = min(out["lo"], a, b), max(out["hi"], a, b)
            out["how"] += (
                f"; the model's step of the run's own configuration misses the measured one by "
                f"{1e3 * gap:+.3g} ms, so the range holds that time kept by the change "
                f"({100 * min(a, b):.0f}%) or removed with it ({100 * max(a, b):.0f}%)"
            )
    return out


def unexplained_range(
    measured, own: Prediction, new: Prediction
) -> tuple[float, float, float] | None:
    """The saving at the two ends of the time the model does not explain, when its step of the run's
    own configuration (own) misses the measured step median (outside its 95% prediction interval,
    which holds a run's own scatter): that time U = measured - own may sit in what the change
    removes (the new step is the model's) or in what it keeps (the new step is the model's + U).
    Returns (saving if U is kept, saving if U is removed, U), or None when the model's own step
    agrees with the measured one. A model that leaves a part of the step out (a per-call cost inside
    training that the microbenchmark does not see, a shaped link's burst) cannot say which of the
    two it is; the range then says so instead of missing."""
    if measured is None or not measured.value or not own.step_s or not new.step_s:
        return None
    if (
        own.lo <= measured.value <= own.hi
    ):  # inside the model's 95% prediction interval (a run's scatter included)
        return None
    gap = measured.value - own.step_s
    per = (new.samples_per_s * new.step_s) / (
        own.samples_per_s * own.step_s
    )  # samples per step, new / own
    # the time the model does not explain, kept after the change; where the model over-predicts (gap
    # < 0) the run is faster than the model everywhere, so the new step shrinks in proportion
    # (subtracting could leave no step at all)
    kept = new.step_s + gap if gap >= 0 else new.step_s * measured.value / own.step_s
    return 1 - kept / (per * measured.value), 1 - new.step_s / (per * measured.value), gap


def contention_cost(record, samples: int = DEFAULT_SAMPLES, seed: int = 0) -> dict | None:
    """What gloo's CPU contention costs this run per sample, for the diagnosis: the run's own
    configuration predicted with compute and all-reduce not slowing each other down (both factors
    1), against the same with the factors the run's DDP timers calibrated (paired draws). None where
    no contention was calibrated (not gloo on CPU, no DDP overlap)."""
    from whatif.profile import Contention
    from whatif.quantity import Quantity

    prof = profile_of(record)
    c = prof.contention
    if c.s_compute.value == 1.0 and c.s_comm.value == 1.0:
        return None
    own = _predict(prof, Config.of(prof), Draws(samples, seed))
    free = replace(
        prof,
        contention=Contention(
            Quantity.exact(1.0), Quantity.exact(1.0), "none (what if)", c.per_call
        ),
    )
    p = _predict(free, Config.of(free), Draws(samples, seed), own=own)
    return {**_saved(p), "how": c.how}


def _saved(p: Prediction) -> dict:
    """The share of the time per sample the prediction saves, with its interval's ends."""
    return {
        "fraction": time_saved(p.speedup),
        "lo": time_saved(p.speedup_lo),
        "hi": time_saved(p.speedup_hi),
    }


def prune(
    record, candidates: list[dict], noise: float = 0.02, **kw
) -> tuple[list[dict], list[tuple[dict, Prediction]]]:
    """For the autotune: the candidates worth measuring, and those the model rules out with
    confidence (the typical speed-up's whole 95% interval below 1 - noise), each with its
    prediction."""
    keep, skipped = [], []
    prof = profile_of(record)
    for change in candidates:
        p = predict(prof, change, **kw)
        if ruled_out(p, noise):
            skipped.append((change, p))
        else:
            keep.append(change)
    return keep, skipped


def ruled_out(p: Prediction, noise: float = 0.02) -> bool:
    """The prediction's typical speed-up has its whole 95% interval below 1 - noise: slower with
    confidence."""
    return p.speedup_hi is not None and p.speedup_hi < 1 - noise
