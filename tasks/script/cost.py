"""The cost of attaching (issue 37): a script's steps/s under task=script against the same script
alone under plain torchrun, rounds interleaved.

    python -m tasks.script.cost [--rounds 3] [--cases plain_ddp,...] [--out results/script_cost]

Both sides read the same thing: rank 0's time from one optimizer step's end to the next, over the
same steps (WARMUP skipped, the next STEPS). Alone, the script runs under `torchrun
--nproc_per_node=2` through tasks/script/bare.py, whose one optimizer-step post hook reads the host
clock (no other module of this project is imported); with the tool, `python train.py task=script`
and the record's per-rank step series. Each round runs every case both ways, the order alternating
between rounds, so that drift on the machine hits both sides alike; the ratio tool / alone and its
95% interval are stats.compare_runs' paired t over the rounds' log steps/s. Writes cost.json and
cost.md (the table, the command, the machine and its load average) into --out."""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
WARMUP, STEPS = 3, 10
GOAL = 0.98
CASES = {  # name: (script, its arguments)
    "plain_ddp": ("examples/plain_ddp.py", ["--epochs", "1"]),
    "accumulate_amp": ("examples/accumulate_amp.py", ["--accumulate", "4", "--steps", "16"]),
    "eval_checkpoint": ("examples/eval_checkpoint.py", ["--every", "5", "--steps", "16"]),
    "vgg11_224": ("tasks/script/cost_cases/vgg11_224.py", ["--steps", "14", "--batch-size", "2"]),
}


def _env() -> dict:
    return {**os.environ, "OMP_NUM_THREADS": "1", "WANDB_MODE": "disabled"}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def alone(script: str, args: list[str], out: Path) -> tuple:
    """(steps/s, CPU seconds per step, the main thread's share of the time waiting for a core) of
    rank 0 over steps WARMUP+1 .. WARMUP+STEPS under plain torchrun."""
    stem = out / "bare"
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nproc_per_node=2",
        f"--master_port={_free_port()}",
        "tasks/script/bare.py",
        script,
        *args,
    ]
    proc = subprocess.run(
        cmd,
        cwd=ROOT,
        env={**_env(), "DDP_COMM_BARE_OUT": str(stem)},
        capture_output=True,
        text=True,
        timeout=1200,
    )
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)}: exit {proc.returncode}\n{proc.stderr[-2000:]}")
    marks = json.loads(Path(f"{stem}.rank0.steps.json").read_text())
    (t0, c0, q0), (t1, c1, q1) = marks[WARMUP - 1], marks[WARMUP + STEPS - 1]
    return STEPS / (t1 - t0), (c1 - c0) / STEPS, (q1 - q0) / (t1 - t0) if q0 is not None else None


def attached(script: str, args: list[str], out: Path) -> tuple:
    """The same of rank 0 over the same steps under task=script (its record's per-rank step series
    and work)."""
    cmd = [
        sys.executable,
        "train.py",
        "task=script",
        f"script.path={script}",
        f"script.args=[{','.join(args)}]",
        f"warmup_steps={WARMUP}",
        f"steps={STEPS}",
        "logger=none",
        f"hydra.run.dir={out}",
    ]
    proc = subprocess.run(cmd, cwd=ROOT, env=_env(), capture_output=True, text=True, timeout=1200)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)}: exit {proc.returncode}\n{proc.stderr[-2000:]}")
    record = json.loads((out / "run_record.json").read_text())
    rank0 = next(r for r in record["result"]["per_rank"] if r["rank"] == 0)
    series = rank0["series"]["step_time_s"]
    assert len(series) == STEPS, f"{out}: {len(series)} measured steps, not {STEPS}"
    work, wall = rank0["work"], sum(series)
    queue = work.get("main_runqueue_s")
    return STEPS / wall, work["cpu_s"] / STEPS, queue / wall if queue is not None else None


def run(out: Path, rounds: int, names: list[str]) -> dict:
    from stats.runs import compare_runs

    out.mkdir(parents=True, exist_ok=True)
    runs = {
        n: {
            "alone": [],
            "tool": [],
            "alone_cpu": [],
            "tool_cpu": [],
            "alone_queue": [],
            "tool_queue": [],
        }
        for n in names
    }
    load0, t0 = os.getloadavg(), time.time()
    for r in range(rounds):
        for name in names:
            script, args = CASES[name]
            sides = ("alone", "tool") if r % 2 == 0 else ("tool", "alone")
            for side in sides:
                where = out / "runs" / f"{name}_{side}_{r}"
                where.mkdir(parents=True, exist_ok=True)
                sps, cpu, queue = (alone if side == "alone" else attached)(script, args, where)
                runs[name][side].append(sps)
                runs[name][f"{side}_cpu"].append(cpu)
                runs[name][f"{side}_queue"].append(queue)
                print(
                    f"[cost] round {r} {name} {side}: {sps:.3f} steps/s, {cpu * 1e3:.1f} ms CPU a "
                    "step, "
                    f"main thread waiting for a core {queue if queue is None else f'{queue:.0%}'} "
                    "of the time",
                    flush=True,
                )
    rows = []
    for name in names:
        a, t = runs[name]["alone"], runs[name]["tool"]
        s = compare_runs(
            [math.log(x) for x in a], [math.log(x) for x in t], range(rounds), range(rounds)
        )
        rows.append(
            {
                "case": name,
                "script": " ".join([CASES[name][0], *CASES[name][1]]),
                "alone_steps_per_s": a,
                "tool_steps_per_s": t,
                "alone_cpu_s_per_step": runs[name]["alone_cpu"],
                "tool_cpu_s_per_step": runs[name]["tool_cpu"],
                "alone_main_queue_share": runs[name]["alone_queue"],
                "tool_main_queue_share": runs[name]["tool_queue"],
                "ratio": s.ratio,
                "ci_lo": s.ci_lo,
                "ci_hi": s.ci_hi,
                "method": s.method,
                "goal_shown": s.ci_lo is not None and s.ci_lo >= GOAL,
            }
        )
    return {
        "command": "python -m tasks.script.cost " + " ".join(sys.argv[1:]),
        "rounds": rounds,
        "warmup_steps": WARMUP,
        "steps": STEPS,
        "goal": GOAL,
        "rows": rows,
        "machine": {
            "host": platform.node(),
            "cpus": os.cpu_count(),
            "platform": platform.platform(),
            "loadavg_at_start": list(load0),
            "loadavg_at_end": list(os.getloadavg()),
        },
        "wall_s": time.time() - t0,
    }


def markdown(res: dict) -> str:
    m = res["machine"]
    lines = [
        f"Attach cost of task=script: rank 0's steps/s over steps {res['warmup_steps'] + 1}-"
        f"{res['warmup_steps'] + res['steps']}, with the tool / alone (plain torchrun), "
        f"{res['rounds']} "
        "interleaved rounds, paired by round.",
        "",
        f"    {res['command']}",
        "",
        f"Machine: {m['host']}, {m['cpus']} CPUs, {m['platform']}; load average "
        f"{m['loadavg_at_start'][0]:.1f} at the start and {m['loadavg_at_end'][0]:.1f} at the end.",
        "",
        "| case | script | alone steps/s (per round) | with the tool steps/s | ratio [95% CI] | >= "
        f"{res['goal']} shown | CPU ms/step alone, tool (median) | main thread waiting for a core, "
        "alone, tool |",
        "|---|---|---|---|---:|---|---|---|",
    ]
    for r in res["rows"]:
        ci = (
            f" [{r['ci_lo']:.3f}, {r['ci_hi']:.3f}]"
            if r["ci_lo"] is not None and r["ci_hi"] is not None
            else " (no interval)"
        )
        lines.append(
            f"| {r['case']} | `{r['script']}` | "
            f"{', '.join(f'{x:.3g}' for x in r['alone_steps_per_s'])} | "
            f"{', '.join(f'{x:.3g}' for x in r['tool_steps_per_s'])} | {r['ratio']:.3f}{ci} | "
            f"{'yes' if r['goal_shown'] else 'no'} | {_ms(r['alone_cpu_s_per_step'])}, "
            f"{_ms(r['tool_cpu_s_per_step'])} | {_share(r['alone_main_queue_share'])}, "
            f"{_share(r['tool_main_queue_share'])} |"
        )
    lines += [
        "",
        f"Interval: {res['rows'][0]['method']}." if res["rows"] else "",
        "",
        "CPU ms/step: rank 0's process CPU time (every thread) over the same steps, which the "
        "share of the cores "
        "the scheduler gave it does not move. Plain torchrun starts each rank in a session of its "
        "own "
        "(start_new_session), and with the kernel's autogroup scheduling a session is one group "
        "for the CPU's "
        "fair share; task=script's ranks stay in the session train.py runs in. On a loaded machine "
        "the ranks' "
        "waits for a core then differ between the two sides, and steps/s with them.",
    ]
    return "\n".join(lines) + "\n"


def _ms(xs: list) -> str:
    return f"{statistics.median(xs) * 1e3:.3g}" if xs else "–"


def _share(xs: list) -> str:
    xs = [x for x in xs if x is not None]
    return f"{statistics.median(xs):.0%}" if xs else "–"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m tasks.script.cost", description=__doc__.split("\n\n")[0]
    )
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument(
        "--cases", default=",".join(CASES), help=f"comma-separated, of: {', '.join(CASES)}"
    )
    p.add_argument("--out", default="results/script_cost")
    args = p.parse_args(argv)
    names = args.cases.split(",")
    if bad := [n for n in names if n not in CASES]:
        print(
            f"error: unknown case(s) {', '.join(bad)}; one of {', '.join(CASES)}", file=sys.stderr
        )
        return 2
    if args.rounds < 2:
        print("error: --rounds must be 2 or more (the interval pairs rounds)", file=sys.stderr)
        return 2
    res = run(Path(args.out), args.rounds, names)
    out = Path(args.out)
    (out / "cost.json").write_text(json.dumps(res, indent=2))
    (out / "cost.md").write_text(markdown(res))
    print(markdown(res))
    return 0


if __name__ == "__main__":
    sys.exit(main())
