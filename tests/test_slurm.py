"""launcher=slurm: its settings (one home: launcher.*), rank detection, and sweeps through a real
Slurm cluster.

The tests marked `slurm` need a running cluster they may submit to as root (tests/slurm_cluster.py
says which, and why they skip elsewhere); CI starts one with launchers/slurm_cluster/start.sh. Each
sweep gets its own directory (and so its own submitit folder): job ids restart at 1 on a fresh
cluster."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from base.errors import ConfigError
from launchers import slurm
from launchers.slurm import settings
from tests.conftest import ROOT, TINY, train_main
from tests.slurm_cluster import (
    START,
    needs_cluster,
    never_leave_behind,
    start_endless_sweep,
    table_rows,
    wait_until_measuring,
)

TWO_RANKS = [
    "launcher=slurm",
    "launcher.tasks_per_node=2",
    "launcher.cpus_per_task=1",
    "launcher.timeout_min=10",
]
LAUNCHER = "hydra_plugins.slurm_sweep_launcher.SlurmLauncher"


def _hydra_compose(overrides):
    from hydra import compose as hydra_compose, initialize_config_dir

    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
        return hydra_compose(config_name="config", overrides=overrides, return_hydra_config=True)


# ------------------------------------------------------------------------------ config (no cluster)


@pytest.mark.parametrize(
    "overrides, world, tasks, nodes, gpus",
    [
        (["launcher=slurm"], 1, 1, 1, None),
        (["launcher=slurm", "launcher.tasks_per_node=2"], 2, 2, 1, None),
        (
            ["launcher=slurm", "launcher.nodes=16", "launcher.gpus_per_node=1"],
            16,
            1,
            16,
            1,
        ),  # the command
        (
            ["launcher=slurm", "launcher.gpus_per_node=4", "scale=paper"],
            4,
            4,
            1,
            4,
        ),  # one rank per GPU
        (["launcher=slurm_16x1"], 16, 1, 16, 1),
        (["launcher=slurm_1x8"], 8, 8, 1, 8),
    ],
)
def test_slurm_world_size_is_nodes_times_tasks(overrides, world, tasks, nodes, gpus):
    """Every Slurm setting is read from launcher.*: hydra.launcher holds the launcher class and
    nothing else."""
    cfg = _hydra_compose(overrides)
    assert cfg.world_size == world
    assert (cfg.launcher.nodes, cfg.launcher.tasks_per_node, cfg.launcher.gpus_per_node) == (
        nodes,
        tasks,
        gpus,
    )
    assert OmegaConf.to_container(cfg.hydra.launcher) == {"_target_": LAUNCHER}
    assert cfg.hydra.runtime.choices["hydra/launcher"] == "slurm_sweep"
    assert cfg.launcher.srun_args == ["--kill-on-bad-exit=1"]


@pytest.mark.skipif(
    shutil.which("srun") is None,
    reason="needs Slurm's client commands (srun) to build a Slurm "
    f"executor; `sudo {START}` installs them",
)
def test_user_facing_keys_reach_sbatch(tmp_path):
    """Every launcher.* key lands in the sbatch script the launcher would submit (rendered, not
    submitted)."""
    overrides = [
        "launcher=slurm",
        "launcher.nodes=2",
        "launcher.tasks_per_node=4",
        "launcher.gpus_per_node=4",
        "launcher.cpus_per_task=6",
        "launcher.mem_gb=64",
        "launcher.timeout_min=30",
        "launcher.partition=gpu",
        "launcher.account=proj",
        "launcher.qos=high",
        "launcher.constraint=a100",
        "launcher.gres=gpu:a100:4",
        "launcher.setup=['module load cuda']",
        "+launcher.additional_parameters.exclusive=true",
        "launcher.array_parallelism=3",
    ]
    cfg = _hydra_compose(overrides)
    folder = tmp_path / ".submitit" / "%j"
    executor = settings.make_executor(
        OmegaConf.to_container(cfg.launcher, resolve=True), folder, job_name="train"
    )
    script = executor._executor._make_submission_file_text(
        "python -m submitit.core._submit x", "uid"
    )
    for flag in (
        "--nodes=2",
        "--ntasks-per-node=4",
        "--gpus-per-node=4",
        "--cpus-per-task=6",
        "--mem=64GB",
        "--time=30",
        "--partition=gpu",
        "--account=proj",
        "--qos=high",
        "--constraint=a100",
        "--gres=gpu:a100:4",
        "--exclusive",
        "--job-name=train",
    ):
        assert f"#SBATCH {flag}" in script, flag
    assert "\nmodule load cuda\n" in script
    assert f"export PYTHONPATH={ROOT}" in script
    assert "--kill-on-bad-exit=1" in script and "--error" not in script  # one log per task
    assert f"{folder}/%j_0_log.out" in script


def _cfg(**kw):
    base = {
        "world_size": 2,
        "backend": "auto",
        "launcher": {
            "name": "slurm",
            "nodes": 1,
            "tasks_per_node": 2,
            "gpus_per_node": None,
            "cpus_per_task": None,
            "mem_gb": None,
            "timeout_min": 60,
            "partition": None,
        },
    }
    for key, value in kw.items():
        if key in base["launcher"]:
            base["launcher"][key] = value
        else:
            base[key] = value
    return OmegaConf.create(base)


@pytest.mark.parametrize(
    "kw, words",
    [
        ({"world_size": 8}, ["world_size=8", "1 x 2 = 2", "launcher.tasks_per_node"]),
        ({"tasks_per_node": 0}, ["launcher.tasks_per_node=0"]),
        ({"mem_gb": -1}, ["launcher.mem_gb=-1"]),
        ({"timeout_min": 1.5}, ["launcher.timeout_min=1.5", "whole number"]),
        ({"partition": 3}, ["launcher.partition=3", "text"]),
        (
            {"backend": "nccl", "gpus_per_node": 1, "tasks_per_node": 2},
            ["one GPU per rank", "launcher.tasks_per_node=1"],
        ),
    ],
)
def test_check_config_names_problem_and_fix(kw, words, monkeypatch):
    for var in [v for v in os.environ if v.startswith(("SLURM_", "SUBMITIT_"))]:
        monkeypatch.delenv(var)
    with pytest.raises(ConfigError) as err:
        slurm.check_config(_cfg(**kw))
    for word in words:
        assert word in str(err.value)
    slurm.check_config(_cfg())  # the consistent config passes


def test_launcher_slurm_without_multirun_is_refused(tmp_path):
    """Hydra only uses its launcher in a multirun: without -m the job would quietly run here, on
    this machine."""
    proc = train_main(["launcher=slurm", *TINY], tmp_path)
    assert proc.returncode != 0
    assert "add -m" in proc.stdout + proc.stderr, (proc.stdout + proc.stderr)[-2000:]
    assert (
        not (proc.out_dir / "run_record.json").exists()
        or json.loads((proc.out_dir / "run_record.json").read_text())["status"] == "failed"
    )


def test_world_size_disagreeing_with_slurm_layout_is_refused_before_submitting(tmp_path):
    proc = train_main(["launcher=slurm", *TINY, "world_size=4", "bucket=25,100"], tmp_path, True)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 2
    assert "world_size=4" in out and "1 x 1 = 1" in out and "launcher.tasks_per_node" in out, out[
        -2000:
    ]
    assert "Traceback" not in out
    assert not (proc.out_dir / ".submitit").exists()  # nothing was queued


@pytest.mark.parametrize(
    "typed, said, expected",
    [
        (
            [
                "hydra/launcher=submitit_slurm",
                "hydra.launcher.partition=gpu",
                "hydra.launcher.tasks_per_node=2",
                "hydra.launcher.exclude=n3",
            ],
            "hydra/launcher=submitit_slurm chosen without launcher=slurm",
            [
                "launcher.partition=gpu",
                "launcher.tasks_per_node=2",
                "+launcher.additional_parameters.exclude=n3",
            ],
        ),
        (
            ["launcher=slurm", "+hydra.launcher.partition=gpu"],
            "hydra.launcher.partition set",
            ["launcher.partition=gpu"],
        ),
    ],
)
def test_hydra_submitit_habits_are_refused_with_the_equivalent_command(
    typed, said, expected, tmp_path
):
    """A hydra-submitit-launcher user's command (hydra/launcher=submitit_slurm,
    hydra.launcher.<key>) is refused before anything is submitted, in one line naming the command
    that does it here; that command composes to the same Slurm job with every setting in its one
    place, launcher.*."""
    proc = train_main([*typed, *TINY, "bucket=25,100"], tmp_path, multirun=True)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 2 and "Traceback" not in out, out[-2000:]
    [line] = [ln for ln in out.splitlines() if ln.startswith("error:")]
    assert said in line and "launcher.*" in line, line
    command = line.split("Run: ", 1)[1]
    assert command.startswith("python train.py -m launcher=slurm "), command
    words = command.split()[3:]
    assert set(expected) | {"bucket=25,100", "model=vgg11_tiny", "logger=none"} <= set(words), words
    assert not any(
        w.lstrip("+").startswith(("hydra.launcher.", "hydra/launcher")) for w in words
    ), words
    assert not (proc.out_dir / ".submitit").exists()  # nothing was queued
    cfg = _hydra_compose([w for w in words if "," not in w])
    assert cfg.launcher.partition == "gpu" and cfg.world_size == cfg.launcher.tasks_per_node
    assert OmegaConf.to_container(cfg.hydra.launcher) == {"_target_": LAUNCHER}


def test_stock_plugin_name_with_launcher_slurm_is_this_launcher():
    """launcher=slurm hydra/launcher=submitit_slurm (no hydra.launcher.* key changed) runs as
    launcher=slurm does: the stock plugin's choice name is answered by this launcher, which has
    nothing to refuse."""
    from hydra_plugins.hydra_submitit_launcher.config import SlurmQueueConf

    cfg = _hydra_compose(["launcher=slurm", "hydra/launcher=submitit_slurm"])
    params = OmegaConf.to_container(cfg.hydra.launcher, resolve=True)
    assert params.pop("_target_") == LAUNCHER
    stock = OmegaConf.to_container(OmegaConf.structured(SlurmQueueConf))
    assert settings.stock_plugin_refusal(cfg, params, stock) is None
    assert "launcher.qos set" in settings.stock_plugin_refusal(
        cfg, {**params, "qos": "high"}, stock
    )


def _rank_probe(env: dict) -> dict:
    code = (
        "import json, os; from launchers.slurm import export_rank_env; ok = export_rank_env(); "
        "print(json.dumps({'ok': ok, **{k: os.environ.get(k) for k in "
        "('RANK', 'WORLD_SIZE', 'LOCAL_RANK', 'MASTER_ADDR', 'MASTER_PORT')}}))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.subprocess
def test_batch_shell_is_not_a_rank():
    """The environment of an sbatch script / salloc shell (as Slurm 22.05 sets it: SLURM_PROCID and
    SLURM_NTASKS, no step) is the user's shell: `python train.py` there starts its own ranks."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("SLURM_", "SUBMITIT_", "RANK", "WORLD_SIZE", "MASTER_", "LOCAL_RANK"))
    }
    assert _rank_probe(env) == {
        "ok": False,
        "RANK": None,
        "WORLD_SIZE": None,
        "LOCAL_RANK": None,
        "MASTER_ADDR": None,
        "MASTER_PORT": None,
    }
    batch = {
        **env,
        "SLURM_JOB_ID": "7",
        "SLURM_NTASKS": "2",
        "SLURM_NPROCS": "2",
        "SLURM_PROCID": "0",
        "SLURM_LOCALID": "0",
        "SLURM_JOB_NODELIST": "node[1-2]",
        "SLURM_JOB_NUM_NODES": "2",
    }
    assert _rank_probe(batch)["ok"] is False


def test_asking_whether_a_process_is_a_rank_changes_nothing():
    """already_a_rank is a question: in a Slurm step's task it says yes and exports nothing;
    become_rank (once, at the start of a job) exports the rank's variables. The config checks only
    ask."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(
            ("SLURM_", "SUBMITIT_", "RANK", "WORLD_SIZE", "MASTER_", "LOCAL_RANK", "LOCAL_WORLD")
        )
    }
    step = {
        **env,
        "SLURM_JOB_ID": "7",
        "SLURM_STEP_ID": "0",
        "SLURM_PROCID": "1",
        "SLURM_LOCALID": "1",
        "SLURM_STEP_NUM_TASKS": "2",
        "SLURM_STEP_NUM_NODES": "1",
        "SLURM_STEP_NODELIST": "node[03-04]",
    }
    code = (
        "import json, os; from launchers import already_a_rank, become_rank; asked = "
        "already_a_rank(); "
        "before = {k: os.environ.get(k) for k in ('RANK', 'WORLD_SIZE', 'MASTER_ADDR')}; became = "
        "become_rank(); "
        "print(json.dumps({'asked': asked, 'before': before, 'became': became, "
        "'after': {k: os.environ.get(k) for k in ('RANK', 'WORLD_SIZE', 'LOCAL_RANK', "
        "'MASTER_ADDR')}}))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, env=step, capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stderr
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got["asked"] is True and got["before"] == {
        "RANK": None,
        "WORLD_SIZE": None,
        "MASTER_ADDR": None,
    }
    assert got["became"] is True
    assert got["after"] == {
        "RANK": "1",
        "WORLD_SIZE": "2",
        "LOCAL_RANK": "1",
        "MASTER_ADDR": "node03",
    }


# ----------------------------------------------------------------------------------- on the cluster


@pytest.mark.slurm
@needs_cluster()
def test_rank_env_from_srun_salloc_and_sbatch(tmp_path):
    """srun tasks are ranks (RANK = task, one master); salloc's shell and sbatch's script are not;
    one task is not."""
    code = (
        "from launchers.slurm import export_rank_env, job_info; import os, json; ok = "
        "export_rank_env(); "
        "print('PROBE', json.dumps({'ok': ok, 'info': job_info(), **{k: os.environ.get(k) for k in "
        "('RANK', 'WORLD_SIZE', 'LOCAL_RANK', 'MASTER_ADDR', 'MASTER_PORT')}}))"
    )
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("SUBMITIT_", "RANK", "WORLD_SIZE", "MASTER_"))
    }

    def probes(cmd):
        out = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
        assert out.returncode == 0, out.stderr
        return [
            json.loads(line.split("PROBE", 1)[1])
            for line in out.stdout.splitlines()
            if "PROBE" in line
        ]

    ranks = probes(["srun", "-n", "2", "-c", "1", "-t", "5", sys.executable, "-c", code])
    assert sorted(p["RANK"] for p in ranks) == ["0", "1"]
    assert {p["WORLD_SIZE"] for p in ranks} == {"2"} and {p["LOCAL_RANK"] for p in ranks} == {
        "0",
        "1",
    }
    assert len({(p["MASTER_ADDR"], p["MASTER_PORT"]) for p in ranks}) == 1 and all(
        p["ok"] for p in ranks
    )
    assert all(p["info"]["slurm_job_id"] for p in ranks)

    [one] = probes(["srun", "-n", "1", "-t", "5", sys.executable, "-c", code])
    assert one["ok"] is False and one["RANK"] is None

    [shell] = probes(["salloc", "-n", "2", "-c", "1", "-t", "5", sys.executable, "-c", code])
    assert shell["ok"] is False and shell["RANK"] is None

    script = tmp_path / "batch.sh"
    script.write_text(f'#!/bin/bash\n{sys.executable} -c "{code}"\n')
    log = tmp_path / "batch.out"
    subprocess.run(
        ["sbatch", "-W", "-n", "2", "-c", "1", "-t", "5", "-o", str(log), str(script)],
        cwd=ROOT,
        env=env,
        check=True,
        capture_output=True,
        timeout=120,
    )
    [batch] = [
        json.loads(line.split("PROBE", 1)[1])
        for line in log.read_text().splitlines()
        if "PROBE" in line
    ]
    assert batch["ok"] is False and batch["RANK"] is None and batch["info"]["log"] == str(log)


@pytest.mark.slurm
@pytest.mark.slow
@needs_cluster()
def test_killed_job_gets_one_failed_record_and_one_wandb_run_from_the_submitting_host(tmp_path):
    """A job killed by Slurm (SIGKILL to every task, as the OOM killer or a dead node would) writes
    nothing itself: the submitting host notices, gives it its one failed record (job id, state, log)
    through job.finalise, which logs the one W&B run (offline here), and still prints the table."""
    sweep = tmp_path / "sweep"
    proc = start_endless_sweep(TWO_RANKS, sweep)
    job_id = None
    try:
        job_id = wait_until_measuring(proc, sweep)
        killed = time.monotonic()
        subprocess.run(["scancel", "--signal=KILL", job_id], check=True, timeout=30)
        out, _ = proc.communicate(timeout=180)
        noticed = time.monotonic() - killed
    finally:
        never_leave_behind(proc, job_id)
    assert proc.returncode != 0, out[-3000:]
    assert [p.relative_to(sweep) for p in sweep.rglob("run_record.json")] == [
        Path("0/run_record.json")
    ]
    record = json.loads((sweep / "0" / "run_record.json").read_text())
    assert record["status"] == "failed" and record["job"]["slurm_job_id"] == job_id
    assert "ended without a result" in record["error"] and "Slurm state" in record["error"], record[
        "error"
    ]
    assert Path(record["job"]["log"]).is_file()
    assert record["env"]["hostnames"], record["env"]  # from sacct's node list
    assert len(list((sweep / "0" / "wandb").glob("offline-run-*"))) == 1
    row = " ".join(table_rows(sweep)["0"])
    assert "failed" in row and job_id in row
    assert noticed < 60, f"the submitting host took {noticed:.0f} s to notice the killed job"


@pytest.mark.slurm
@needs_cluster()
def test_sbatch_refusal_is_a_clear_error(tmp_path):
    """Through train.py's main() in this process (train_main; sbatch still runs, on the cluster):
    the refusal is the submitting process's, and a `python train.py` start added ~2 CPU s to the
    sweep's own composes (issue 36)."""
    proc = train_main(
        ["launcher=slurm", *TINY, "launcher.partition=no_such_partition", "bucket=25,100"],
        tmp_path,
        multirun=True,
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0
    assert "sbatch refused the job array" in out and "invalid partition" in out.lower(), out[-2000:]
    assert "launcher.partition" in out
