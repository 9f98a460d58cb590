"""The cost of attaching (issue 37): a script's steps/s under task=script against the same script
alone, rounds interleaved; and the tool's own hooks' time per step, a second, tighter estimate.

    python -m tasks.script.cost [--rounds 4] [--cases plain_ddp,...] [--out results/script_cost]
    python -m tasks.script.cost --table results/script_cost     # the tables from cost.json's runs

End to end: both sides read rank 0's time from one optimizer step's end to the next over the same
steady window (each case's warm-up skipped, then its measured steps: hundreds of steps for the
examples, seconds of wall each). Alone, the script's ranks are started by torch's elastic agent as
task=script's launcher starts them (tasks/script/bare.py: elastic_launch, spawn; one optimizer-step
post hook reading the host clock, no other module of this project); with the tool,
`python train.py task=script` and the record's per-rank step series. Both sides get
OMP_NUM_THREADS=1 and their torch thread counts are recorded and compared. Each round runs every
case both ways, the order alternating between rounds, so that the machine's drift hits both sides
alike; the ratio tool / alone and its 95% interval are stats.compare_runs' paired t over the
rounds' log steps/s (and the same for the median step, which a neighbour's burst moves less).

Micro route: the tool's hooks time themselves (result.per_rank[].series.tool_s: host seconds in
its hooks per step, the real calls they wrap left out), so each run with the tool gives 1 - hooks /
step; its interval is a t over the runs (stats.run_level). The all-reduce made in place of DDP's
built-in (series.substituted_hook_s: the scaling by 1/world size and the process group's
allreduce call; before issue 37's cut, allreduce_hook's whole call) is timed whole: a lower ratio
bound, since the built-in does the same scaling and all-reduce in C++. What the micro route
cannot see (the launcher's agent, the rank side's threads, caches) is what the end-to-end ratio
holds.

Writes cost.json and cost.md (the tables, the command, the machine and its load) into --out."""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
GOAL = 0.98
# name: (script, its arguments, warm-up steps skipped, steps measured); each script's arguments
# give it a few steps beyond the window
CASES = {
    "plain_ddp": ("examples/plain_ddp.py", ["--epochs", "5"], 5, 150),
    "accumulate_amp": (
        "examples/accumulate_amp.py",
        ["--accumulate", "2", "--steps", "106"],
        5,
        100,
    ),
    "eval_checkpoint": ("examples/eval_checkpoint.py", ["--every", "5", "--steps", "106"], 5, 100),
    # the same script on 8x8 images: its hooks, buckets, no_sync and GradScaler with a sixteenth of
    # the convolutions' work, so that a fixed per-step cost is 5-10x as visible
    "accumulate_amp_8x8": (
        "examples/accumulate_amp.py",
        ["--accumulate", "2", "--steps", "106", "--size", "8"],
        5,
        100,
    ),
    "vgg11_224": (
        "tasks/script/cost_cases/vgg11_224.py",
        ["--steps", "18", "--batch-size", "2"],
        2,
        15,
    ),
}
DEFAULT = ("plain_ddp", "accumulate_amp", "eval_checkpoint")


def _env() -> dict:
    return {
        **os.environ,
        "OMP_NUM_THREADS": "1",
        "MKL_NUM_THREADS": "1",
        "WANDB_MODE": "disabled",
    }


def _run(cmd: list[str], env: dict) -> None:
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=1200)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)}: exit {proc.returncode}\n{proc.stderr[-2000:]}")


def alone(name: str, out: Path) -> dict:
    """Rank 0's step times, CPU seconds per step, main-thread run-queue share and thread counts over
    the case's window, the script alone."""
    script, args, warmup, steps = CASES[name]
    stem = out / "bare"
    cmd = [sys.executable, "tasks/script/bare.py", "--nproc", "2", script, *args]
    _run(cmd, {**_env(), "DDP_COMM_BARE_OUT": str(stem)})
    marks = json.loads(Path(f"{stem}.rank0.steps.json").read_text())
    assert len(marks) >= warmup + steps, f"{out}: {len(marks)} steps, not {warmup + steps}"
    window = marks[warmup - 1 : warmup + steps] if warmup else None
    assert window is not None, "a warm-up of at least one step: the window starts at a step's end"
    (t0, c0, q0, g0), (t1, c1, q1, g1) = window[0], window[-1]
    return {
        "step_s": [b[0] - a[0] for a, b in zip(window, window[1:])],
        "cpu_s_per_step": (c1 - c0) / steps,
        "gc_s_per_step": (g1 - g0) / steps,
        "queue_share": (q1 - q0) / (t1 - t0) if q0 is not None else None,
        "threads": json.loads(Path(f"{stem}.rank0.threads.json").read_text()),
    }


def attached(name: str, out: Path, comm_timing: str = "hook") -> dict:
    """The same under task=script (its record's rank 0 series, work and threads), with the tool's
    hooks' own time per step; comm_timing: script.comm_timing (ddp_logging: no comm hook where
    the script asks for none)."""
    script, args, warmup, steps = CASES[name]
    cmd = [
        sys.executable,
        "train.py",
        "task=script",
        f"script.path={script}",
        f"script.args=[{','.join(args)}]",
        f"warmup_steps={warmup}",
        f"steps={steps}",
        "logger=none",
        f"script.comm_timing={comm_timing}",
        f"hydra.run.dir={out}",
    ]
    _run(cmd, _env())
    record = json.loads((out / "run_record.json").read_text())
    rank0 = next(r for r in record["result"]["per_rank"] if r["rank"] == 0)
    series = rank0["series"]
    assert len(series["step_time_s"]) == steps, f"{out}: {len(series['step_time_s'])} steps"
    work, wall = rank0["work"], sum(series["step_time_s"])
    queue = work.get("main_runqueue_s")
    threads = rank0.get("threads") or {}
    return {
        "step_s": series["step_time_s"],
        "cpu_s_per_step": work["cpu_s"] / steps,
        "gc_s_per_step": sum(series["gc_s"]) / steps,
        "queue_share": queue / wall if queue is not None else None,
        "threads": {k: threads.get(k) for k in ("intra_op", "inter_op", "OMP_NUM_THREADS")},
        "tool_s": series.get("tool_s"),
        "substituted_hook_s": series.get("substituted_hook_s"),
        "substituted_collective_s": series.get("substituted_collective_s"),
    }


def run(out: Path, rounds: int, names: list[str], comm_timing: str = "hook") -> dict:
    out.mkdir(parents=True, exist_ok=True)
    runs: dict = {n: {"alone": [], "tool": []} for n in names}
    loads, t0 = [os.getloadavg()[0]], time.time()
    for r in range(rounds):
        for name in names:
            sides = ("alone", "tool") if r % 2 == 0 else ("tool", "alone")
            for side in sides:
                where = out / "runs" / f"{name}_{side}_{r}"
                where.mkdir(parents=True, exist_ok=True)
                m = alone(name, where) if side == "alone" else attached(name, where, comm_timing)
                runs[name][side].append(m)
                loads.append(os.getloadavg()[0])
                print(
                    f"[cost] round {r} {name} {side}: {len(m['step_s']) / sum(m['step_s']):.3f} "
                    f"steps/s, median step {statistics.median(m['step_s']) * 1e3:.2f} ms, "
                    f"{m['cpu_s_per_step'] * 1e3:.1f} ms CPU a step; load {loads[-1]:.1f}",
                    flush=True,
                )
    rows = [row(name, runs[name], rounds) for name in names]
    return {
        "command": "python -m tasks.script.cost " + " ".join(sys.argv[1:]),
        "rounds": rounds,
        "comm_timing": comm_timing,
        "goal": GOAL,
        "rows": rows,
        "runs": runs,
        "machine": {
            "host": platform.node(),
            "cpus": os.cpu_count(),
            "platform": platform.platform(),
            "loadavg_1min": {
                "start": loads[0],
                "end": loads[-1],
                "median": statistics.median(loads),
                "max": max(loads),
            },
        },
        "wall_s": time.time() - t0,
    }


def row(name: str, runs: dict, rounds: int) -> dict:
    """The case's end-to-end ratios (mean steps/s, median step) and its micro-route ratios."""
    from stats.runs import compare_runs, run_level

    a, t = runs["alone"], runs["tool"]
    rate = [[len(m["step_s"]) / sum(m["step_s"]) for m in side] for side in (a, t)]
    med = [[1 / statistics.median(m["step_s"]) for m in side] for side in (a, t)]
    # the CPU route: steps per CPU second of rank 0's process (its threads, the rank side's
    # included) over the same window; a neighbour's load moves it far less than the wall clock
    cpu = [[1 / m["cpu_s_per_step"] for m in side] for side in (a, t)]

    def paired(pair):
        s = compare_runs(
            [math.log(x) for x in pair[0]],
            [math.log(x) for x in pair[1]],
            range(rounds),
            range(rounds),
        )
        return {"ratio": s.ratio, "ci_lo": s.ci_lo, "ci_hi": s.ci_hi, "method": s.method}

    def micro(substituted: str | None):
        """substituted None: the hooks alone; "whole": the substituted all-reduce counted whole;
        "own": counted less its process group's allreduce call (the built-in's own call), None
        where the runs predate that series."""
        ratios = []
        for m in t:
            own = statistics.median(m["tool_s"] or [0.0])
            if substituted == "whole":
                own += statistics.median(m["substituted_hook_s"] or [0.0])
            elif substituted == "own":
                if not m.get("substituted_collective_s"):
                    return {"ratio": None, "ci_lo": None, "ci_hi": None}
                # per step, then the median: the call's wall time under load is milliseconds of
                # waiting, which the difference of two medians would leave to chance
                pairs = zip(m["substituted_hook_s"], m["substituted_collective_s"])
                own += statistics.median(s - c for s, c in pairs)
            ratios.append(1 - own / statistics.mean(m["step_s"]))
        lv = run_level([math.log(x) for x in ratios])
        return {"ratio": lv["value"], "ci_lo": lv["ci_lo"], "ci_hi": lv["ci_hi"]}

    script, args, warmup, steps = CASES[name]
    e2e, by_median, by_cpu = paired(rate), paired(med), paired(cpu)
    hooks, bound, substitution = micro(None), micro("whole"), micro("own")
    own_us = [statistics.median(m["tool_s"] or [0.0]) * 1e6 for m in t]
    sub_us = [statistics.median(m["substituted_hook_s"] or [0.0]) * 1e6 for m in t]
    call_us = [
        statistics.median(m["substituted_collective_s"]) * 1e6
        for m in t
        if m.get("substituted_collective_s")
    ]
    return {
        "case": name,
        "script": " ".join([script, *args]),
        "window": f"steps {warmup + 1}-{warmup + steps}",
        "alone_steps_per_s": rate[0],
        "tool_steps_per_s": rate[1],
        "end_to_end": e2e,
        "median_step": by_median,
        "cpu_route": by_cpu,
        "hooks_us_per_step": own_us,
        "substituted_hook_us_per_step": sub_us,
        "micro": hooks,
        "micro_with_substituted_hook": bound,
        # the process group's allreduce call inside it, per run (the built-in makes the same)
        "substituted_collective_us_per_step": call_us,
        "micro_with_substitution_own": substitution,
        "alone_cpu_ms_per_step": [m["cpu_s_per_step"] * 1e3 for m in a],
        "tool_cpu_ms_per_step": [m["cpu_s_per_step"] * 1e3 for m in t],
        # seconds in the garbage collector a step (None in runs before it was read)
        "alone_gc_ms_per_step": [_ms(m.get("gc_s_per_step")) for m in a],
        "tool_gc_ms_per_step": [_ms(m.get("gc_s_per_step")) for m in t],
        "alone_queue_share": [m["queue_share"] for m in a],
        "tool_queue_share": [m["queue_share"] for m in t],
        "threads_alone": a[0]["threads"] if a else None,
        "threads_tool": t[0]["threads"] if t else None,
        "threads_equal": all(
            m["threads"]["intra_op"] == a[0]["threads"]["intra_op"]
            and m["threads"]["inter_op"] == a[0]["threads"]["inter_op"]
            for m in a + t
        ),
        "goal_shown_end_to_end": e2e["ci_lo"] is not None and e2e["ci_lo"] >= GOAL,
        "goal_shown_micro": bound["ci_lo"] is not None and bound["ci_lo"] >= GOAL,
        "goal_shown_cpu": by_cpu["ci_lo"] is not None and by_cpu["ci_lo"] >= GOAL,
        "goal_shown_micro_own": substitution["ci_lo"] is not None and substitution["ci_lo"] >= GOAL,
    }


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else seconds * 1e3


def _ci(d: dict) -> str:
    if d["ratio"] is None:
        return "–"
    if d["ci_lo"] is None:
        return f"{d['ratio']:.3f} (no interval)"
    return f"{d['ratio']:.3f} [{d['ci_lo']:.3f}, {d['ci_hi']:.3f}]"


def markdown(res: dict) -> str:
    m = res["machine"]
    load = m["loadavg_1min"]
    lines = [
        "Attach cost of task=script: rank 0's steps/s over each case's steady window, with the "
        f"tool / alone, {res['rounds']} interleaved rounds paired by round (end to end); and "
        "1 - the tool's hooks' time / the step, per run with the tool (micro route).",
        "",
        f"    {res['command']}",
        "",
        f"Machine: {m['host']}, {m['cpus']} CPUs, {m['platform']}; 1-minute load average "
        f"{load['start']:.1f} at the start, {load['end']:.1f} at the end, median "
        f"{load['median']:.1f} and max {load['max']:.1f} over the runs; "
        f"{res['wall_s'] / 60:.1f} min.",
        "",
    ]
    if res.get("comm_timing", "hook") != "hook":  # (a table from before the knob: the hook)
        lines += [
            f"The tool side ran with script.comm_timing={res['comm_timing']}: DDP's built-in "
            "all-reduce, no comm hook, no substituted all-reduce (its columns: the hooks' alone).",
            "",
        ]
    lines += [
        "| case | script | window | alone steps/s (per round) | tool steps/s | end to end: ratio "
        "[95% CI] | median step ratio | >= "
        f"{res['goal']} shown end to end | hooks us/step (median per run) | micro ratio | micro "
        "with the substituted all-reduce whole | >= 0.98 shown by the micro route | its allreduce "
        "call us/step (median per run) | micro with the substitution's own part | >= 0.98 shown "
        "by it |",
        "|---|---|---|---|---|---:|---:|---|---|---:|---:|---|---|---:|---|",
    ]
    for r in res["rows"]:
        lines.append(
            f"| {r['case']} | `{r['script']}` | {r['window']} | "
            f"{', '.join(f'{x:.3g}' for x in r['alone_steps_per_s'])} | "
            f"{', '.join(f'{x:.3g}' for x in r['tool_steps_per_s'])} | {_ci(r['end_to_end'])} | "
            f"{_ci(r['median_step'])} | {'yes' if r['goal_shown_end_to_end'] else 'no'} | "
            f"{', '.join(f'{x:.0f}' for x in r['hooks_us_per_step'])} "
            f"(+{statistics.median(r['substituted_hook_us_per_step']):.0f}) | "
            f"{_ci(r['micro'])} | {_ci(r['micro_with_substituted_hook'])} | "
            f"{'yes' if r['goal_shown_micro'] else 'no'} | "
            f"{_us(r.get('substituted_collective_us_per_step'))} | "
            f"{_ci(r['micro_with_substitution_own'])} | "
            f"{'yes' if r['goal_shown_micro_own'] else 'no'} |"
        )
    lines += [
        "",
        "| case | CPU ms/step alone, tool (median) | CPU route: ratio [95% CI] | >= "
        f"{res['goal']} shown by CPU time | in the garbage collector, ms/step alone, tool (per "
        "round) | main thread waiting for a core, alone, tool (median) | torch threads (intra, "
        "inter) alone, tool |",
        "|---|---|---:|---|---|---|---|",
    ]
    for r in res["rows"]:
        ta, tt = r["threads_alone"] or {}, r["threads_tool"] or {}
        lines.append(
            f"| {r['case']} | {statistics.median(r['alone_cpu_ms_per_step']):.3g}, "
            f"{statistics.median(r['tool_cpu_ms_per_step']):.3g} | {_ci(r['cpu_route'])} | "
            f"{'yes' if r['goal_shown_cpu'] else 'no'} | {_per_round(r['alone_gc_ms_per_step'])};"
            f" {_per_round(r['tool_gc_ms_per_step'])} | "
            f"{_share(r['alone_queue_share'])}, {_share(r['tool_queue_share'])} | "
            f"({ta.get('intra_op')}, {ta.get('inter_op')}), ({tt.get('intra_op')}, "
            f"{tt.get('inter_op')}){'' if r['threads_equal'] else ' DIFFER'} |"
        )
    lines += [
        "",
        f"End to end: {res['rows'][0]['end_to_end']['method']}." if res["rows"] else "",
        "The median step ratio is the same over each run's median step time, which a "
        "neighbour's burst moves less than the mean. The CPU route is the same paired t over "
        "steps per CPU second of rank 0's process over the window (all its threads: the "
        "script's, gloo's and, with the tool, the rank side's; the launcher's agent is another "
        "process on both sides): a neighbour's load moves it far less than the wall clock, but "
        "it does not see a cost that is waiting (a lock, the GIL between the script's thread and "
        "gloo's). The garbage collector's time (gc.callbacks on both sides) is in both routes: a "
        "full collection inside a window is tens of ms a step there, and says which side paid it.",
        "",
        "Micro route: the hooks' host time per step (result.per_rank[].series.tool_s, the real "
        "calls they wrap left out; a median over the window's steps, since a hook's wall time "
        "holds any wait for a core inside it), against the run's mean step; t interval over the "
        "runs with the tool. `(+N)`: the all-reduce the tool makes in place of DDP's built-in when "
        "the script asks for no hook (series.substituted_hook_s: the scaling by 1/world size "
        "and the process group's allreduce call; allreduce_hook's whole call before issue 37's "
        "cut), timed whole; "
        "'with the substituted all-reduce whole' counts it all as cost, a lower bound of the "
        "ratio, as the "
        "built-in does the same scaling and all-reduce in C++. 'Its allreduce call' is the "
        "process group's allreduce call inside it (series.substituted_collective_s: the calling "
        "thread's CPU in it, the work queued and the flight recorder's entry), the call DDP's "
        "built-in makes the same from C++; 'the substitution's own part' counts the rest, per "
        "step (the scaling pass, which the built-in folds into its copy of the gradients into "
        "the bucket, the Python around the call, a wait for a core or the GIL inside it): "
        "the substitution's cost, where 'whole' bounds it ('–': runs from before that series). "
        "The micro route does not see "
        "the launcher's agent, the rank side's threads or cache effects: the end-to-end ratio "
        "holds them.",
        "",
        "Alone, the ranks are started as task=script's launcher starts them (tasks/script/bare.py:"
        " torch's elastic agent, spawn), not by torchrun, whose ranks each get a session (and, "
        "with the kernel's autogroup, a fair-share group) of their own: on a loaded machine that "
        "alone moved the two sides' share of the cores.",
    ]
    return "\n".join(lines) + "\n"


def _us(xs: list | None) -> str:
    return ", ".join(f"{x:.0f}" for x in xs) if xs else "–"


def _per_round(xs: list) -> str:
    return ", ".join("–" if x is None else f"{x:.2g}" for x in xs)


def _share(xs: list) -> str:
    xs = [x for x in xs if x is not None]
    return f"{statistics.median(xs):.0%}" if xs else "–"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m tasks.script.cost", description=__doc__.split("\n\n")[0]
    )
    p.add_argument("--rounds", type=int, default=4)
    p.add_argument(
        "--cases", default=",".join(DEFAULT), help=f"comma-separated, of: {', '.join(CASES)}"
    )
    p.add_argument("--out", default="results/script_cost")
    p.add_argument(
        "--comm-timing",
        choices=("hook", "ddp_logging"),
        default="hook",
        help="the tool side's script.comm_timing (docs/script.md)",
    )
    p.add_argument("--table", metavar="DIR", help="write DIR/cost.md from DIR/cost.json; no run")
    args = p.parse_args(argv)
    if args.table:
        where = Path(args.table)
        if not (where / "cost.json").is_file():
            print(
                f"error: {where}/cost.json does not exist: run the measurement first",
                file=sys.stderr,
            )
            return 2
        res = json.loads((where / "cost.json").read_text())
        # the rows again from the runs, so that a column added since is filled where its runs
        # hold the numbers (and says "–" where they do not)
        res["rows"] = [row(name, res["runs"][name], res["rounds"]) for name in res["runs"]]
        (where / "cost.json").write_text(json.dumps(res, indent=2))
        (where / "cost.md").write_text(markdown(res))
        return 0
    names = args.cases.split(",")
    if bad := [n for n in names if n not in CASES]:
        print(
            f"error: unknown case(s) {', '.join(bad)}; one of {', '.join(CASES)}", file=sys.stderr
        )
        return 2
    if args.rounds < 2:
        print("error: --rounds must be 2 or more (the interval pairs rounds)", file=sys.stderr)
        return 2
    res = run(Path(args.out), args.rounds, names, args.comm_timing)
    out = Path(args.out)
    (out / "cost.json").write_text(json.dumps(res, indent=2))
    (out / "cost.md").write_text(markdown(res))
    print(markdown(res))
    return 0


if __name__ == "__main__":
    sys.exit(main())
