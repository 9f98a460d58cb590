"""Every config choice composes onto the schema and resolves; every bad input is refused with one
line naming the fix and exit code 2, before any rank starts: through train.py's real entry point,
in-process (Hydra's main with a patched argv, the rank launcher replaced by a tripwire), and a few
times as a real `python train.py`."""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import pytest
from omegaconf import OmegaConf

import base.schema as schema
import tasks
from device.host import Host
from tests.bad_input import CPU_BOX, GIB, LOGIN_NODE, accepted, composed, refused
from tests.conftest import CONF, compose, read, run_train, train_main

ONE_GPU = Host(gpus=1, cpus=8, free_bytes=60 * GIB, gpu_free_bytes=70 * GIB)


def choices(group: str) -> list[str]:
    return sorted(p.stem for p in (CONF / group).glob("*.yaml"))


# -------------------------------------------------------------------------------------- composition
@pytest.mark.parametrize(
    "group", ["model", "data", "optim", "scale", "launcher", "logger", "variant"]
)
def test_every_group_choice_composes_onto_the_schema(group):
    for choice in choices(group):
        cfg = compose([f"{group}={choice}"])
        assert not OmegaConf.missing_keys(cfg), (choice, OmegaConf.missing_keys(cfg))
        assert OmegaConf.get_type(cfg) is schema.Config
        # typed exactly where the schema types the group
        typed = group in cfg and dataclasses.is_dataclass(OmegaConf.get_type(cfg[group]))
        assert typed == (group in schema.GROUP_SCHEMAS), (group, choice)
    # the two untyped groups: the launcher's options are launchers/slurm's to check; a variant sets
    # top-level keys
    assert (group in schema.GROUP_SCHEMAS) == (group not in ("launcher", "variant"))


def test_sharing_hydras_config_store_composes_the_same_config(monkeypatch):
    """conftest's _hydra_shares_its_config_store (a test-process speed-up) changes no composed
    config: the same overrides composed with Hydra's own deep copy of the store give the same
    YAML."""
    overrides = ["model=vit_l_32", "optim=powersgd", "launcher=slurm_16x1", "scale=smoke"]
    shared = OmegaConf.to_yaml(compose(overrides))
    # the class Hydra's repository uses, after the compose's plugin scan
    from hydra._internal.core_plugins.structured_config_source import StructuredConfigSource

    monkeypatch.delattr(StructuredConfigSource, "__deepcopy__")
    monkeypatch.setattr("tests.conftest._hydra_shares_its_config_store", lambda: None)
    monkeypatch.setattr("tests.conftest._COMPOSED", {})
    assert OmegaConf.to_yaml(compose(overrides)) == shared


@pytest.mark.parametrize("experiment", choices("experiment"))
def test_every_experiment_composes_and_resolves(experiment):
    # logger=none as accepted() composes it, so that both read one compose (conftest's memo)
    cfg = compose([f"experiment={experiment}", "scale=smoke", "logger=none"])
    assert "tags" in cfg and cfg.tags
    plain = accepted([f"experiment={experiment}", "scale=smoke"])
    assert plain["batch_size"] == 2  # command-line scale wins
    # the ViT study's presets bring their model, and only they
    assert (plain["model"]["name"] == "vit_l_32") == ("vit_study" in cfg.tags), (
        experiment,
        plain["model"]["name"],
    )


def test_defaults_are_the_thread_setting_on_this_machine():
    plain = accepted([])
    assert plain["model"]["name"] == "vgg11" and plain["data"]["image_size"] == 224
    assert plain["sync"] == "ddp" and plain["bucket"] is None and plain["world_size"] >= 1
    assert (
        type(plain["sync"]) is str and type(plain["collectives"]["ops"][0]) is str
    )  # the ranks get plain values


def test_choices_come_from_the_registries():
    assert [t.value for t in schema.Task] == list(tasks.TASKS)
    assert schema.DType["fp32"] is schema.DType.float32  # nccl-tests' aliases are enum aliases
    assert (
        accepted(["task=collectives", "collectives.dtype=bf16"])["collectives"]["dtype"]
        == "bfloat16"
    )


def test_the_torchvision_group_builds_any_torchvision_model():
    plain = accepted(["model=torchvision", "model.name=resnet18", "scale=smoke"])
    assert plain["model"] == {
        "_target_": "models.torchvision_model",
        "arch": "torchvision",
        "name": "resnet18",
        "num_classes": 1000,
    }
    assert (
        accepted(["model=vgg11_tiny", "model.name=vgg11_tiny"])["model"]["name"] == "vgg11_tiny"
    )  # its own name


def test_pair_groups_sets_world_size_from_pairs():
    assert accepted(["task=pair_groups", "pairs=3"])["world_size"] == 6


def test_nccl_tests_size_suffixes():
    from tasks import collectives

    c = collectives.settings(
        composed(["task=collectives", "collectives.min_bytes=64K", "collectives.max_bytes=1M"])
    )
    assert collectives.sizes(c) == [65536, 262144, 1048576]


# ---------------------------------------------------------------------------------------- bad input
BAD = [
    # refused by Hydra while composing onto the schema: train.py prints one line instead of Hydra's
    # several
    (
        ["sync=allgather"],
        "sync='allgather' is not known; choose one of: ddp, per_param, flat, local",
    ),
    (["backend=mpi"], "backend='mpi' is not known"),
    (["task=nope"], "task='nope' is not known"),
    (["h2d=magic"], "h2d='magic' is not known"),
    (["precision=fp8"], "precision='fp8' is not known"),
    (["data.kind=lmdb"], "data.kind='lmdb' is not known; choose one of: fake, raw_folder"),
    (
        ["model.arch=resnet"],
        "model.arch='resnet' is not known; choose one of: vgg, torchvision, vit, timm",
    ),
    (["logger=wandb", "logger.mode=sometimes"], "logger.mode='sometimes' is not known"),
    (["steps=1.5"], "steps=1.5: must be a whole number"),
    (["batch_size=2.5"], "batch_size=2.5: must be a whole number"),
    (["warmup_steps=1.5"], "warmup_steps=1.5: must be a whole number"),
    (["bukcet=100"], "bukcet: no such key. Did you mean bucket=100?"),
    (["+bukcet=100"], "Did you mean bucket=100?"),
    (["model.nme=x"], "model.nme: no such key. Did you mean model.name=x?"),
    (
        ["optim=nope"],
        "optim=nope is not an option of optim; choose one of: bf16, fp16, none, powersgd. "
        "Did you mean optim=none?",
    ),
    (["optim=bf16,powersgd"], "needs -m"),
    (
        ["+accumulate=3"],
        "+accumulate=...: accumulate is in the config already; set it without the +: accumulate=3",
    ),
    (
        ["bucket=25MB"],
        "bucket=25MB: must be a number (got str '25MB'), e.g. bucket=25 or bucket=2.5. The bucket "
        "is in "
        "MB (DDP's bucket_cap_mb, so bucket=25MB is bucket=25)",
    ),
    (["collectives.ops=[allreduce]"], "Did you mean all_reduce?"),
    (["collectives.ops=all_reduce"], "must be a list, e.g. collectives.ops=[all_reduce]"),
    # refused by the checks, in the job, before any rank starts
    (["batch_size=0"], "batch_size=0: must be >= 1"),
    (["steps=-1"], "steps=-1: must be >= 1"),
    (["bucket=0"], "bucket=0: must be > 0"),
    (["accumulate=0"], "accumulate=0: must be >= 1"),
    (["world_size=0"], "world_size=0: must be >= 1"),
    (["~accumulate"], "accumulate has no value"),
    (["model=vgg11", "model.arch=vit"], "model.arch=vit does not fit model=vgg11"),
    (["model=timm", "model.name=not_a_model_xyz"], "is not a timm model"),
    # issue 19.8: a name the arch does not read, a torchvision/timm name typed as the option, a
    # near-miss name
    (
        ["model.name=vit_b_16"],
        "model.name=vit_b_16: model=vgg11 and model=vgg11_tiny (arch vgg) build their network "
        "from their own keys and do not use model.name",
    ),
    (
        ["model.name=vit_b_16"],
        "vit_b_16 is a torchvision model: model=torchvision model.name=vit_b_16.",
    ),
    (
        ["model=vit_tiny", "model.name=resnet50"],
        "model=torchvision model.name=resnet50 or model=timm model.name=",
    ),
    (
        ["model=resnet50"],
        "resnet50 is a torchvision and a timm model: model=torchvision model.name=resnet50 or "
        "model=timm model.name=resnet50.",
    ),
    (
        ["model=timm", "model.name=resnet_5O"],
        "model.name='resnet_5O' is not a timm model; nearest: resnet50",
    ),
    (["model=torchvision", "model.name=resnet5"], "is not a torchvision model; nearest: resnet50"),
    (["optim=bf16", "sync=per_param"], "needs sync=ddp"),
    (
        ["optim=bf16", "optim._target_=null"],
        "optim=bf16 names no comm hook (optim._target_ is null)",
    ),
    (
        ["logger=wandb", "logger._target_=null"],
        "logger=wandb names no logger (logger._target_ is null)",
    ),
    (["optim=powersgd", "optim.rank=0"], "optim.rank=0: must be >= 1"),
    (["optim=powersgd", "optim.start_iter=1"], "optim.start_iter must be > 1"),
    (
        ["optim=powersgd", "optim.min_compression_rate=-1"],
        "optim.min_compression_rate=-1.0: must be >= 0",
    ),
    (["optim=powersgd", "warmup_steps=1"], "1 measured step(s) would not be PowerSGD at all"),
    (["task=pair_groups", "pairs=0"], "pairs=0: must be >= 1"),
    (["fault.rank=2"], "fault.rank=2 but the run has 2 ranks (0...1), so the fault never fires"),
    (["fault.rank=1", "fault.step=12"], "fault.step=12 but the run's steps are 0...11"),
    (["task=collectives", "fault.rank=1"], "task=collectives never reaches it"),
    (["world_size=64"], "world_size=64 starts 64 ranks on this machine's 2 CPUs"),
    (["backend=nccl"], "backend=nccl needs CUDA GPUs and this machine has none"),
    (["cuda_graphs=true"], "cuda_graphs=true needs a CUDA GPU"),
    (
        ["task=collectives", "collectives.min_bytes=4096", "collectives.max_bytes=1024"],
        "larger than max_bytes",
    ),
    (
        ["task=collectives", "collectives.max_bytes=12X"],
        "collectives.max_bytes='12X': a size in bytes",
    ),
    (["task=pair_groups", "pairs=100000"], "pairs=100000 starts 200000 ranks"),
]


@pytest.mark.parametrize("overrides,message", BAD, ids=[" ".join(o) for o, _ in BAD])
def test_bad_input_is_one_line_before_any_rank(overrides, message):
    """What train.py prints (as `error: ...`, exit code 2: the next test) for each bad input."""
    assert message in refused(overrides)


ENTRY = [
    (["sync=allgather"], BAD[0][1]),  # refused by Hydra
    (["+bukcet=100"], "Did you mean bucket=100?"),  # refused before Hydra runs
    (["batch_size=0"], "batch_size=0: must be >= 1"),  # refused in the job, by the schema
    (["world_size=64"], "world_size=64 starts 64 ranks"),
]  # refused in the job, by a task check


@pytest.mark.parametrize("overrides,message", ENTRY, ids=[" ".join(o) for o, _ in ENTRY])
def test_bad_input_exits_2_before_any_rank_starts(
    overrides, message, tmp_path, monkeypatch, capsys
):
    """train.py's own entry point, in-process: one line on stderr, exit code 2, and no rank was ever
    started."""
    import launchers.local

    import train

    def tripwire(*args, **kwargs):
        raise AssertionError("a rank was started")

    monkeypatch.setattr(launchers.local, "launch_local", tripwire)
    monkeypatch.setattr(Host, "probe", classmethod(lambda cls: CPU_BOX))
    monkeypatch.setattr("device.host.gpu_count", lambda: CPU_BOX.gpus)
    monkeypatch.setattr(
        sys, "argv", ["train.py", *overrides, "logger=none", f"hydra.run.dir={tmp_path / 'run'}"]
    )
    code = train.main()
    err = capsys.readouterr().err
    assert code == 2, err
    assert "Traceback" not in err
    lines = [line for line in err.splitlines() if message in line]
    assert lines and lines[0].startswith("error: "), err
    assert not (tmp_path / "run").exists()  # nothing on disk but the error line (issue 19.10)


def _no_wandb(monkeypatch):
    from results import wandb_log

    def tripwire(*args, **kwargs):
        raise AssertionError("a W&B run was opened")

    monkeypatch.setattr(wandb_log, "log_run", tripwire)


def test_a_refused_run_leaves_nothing_but_the_error_line(tmp_path, monkeypatch, capsys):
    """Issue 19.10: a typo caught after composition wrote outputs/<date>/<time>/run_record.json as a
    failed run and opened a W&B run (online: a failed run in the user's project for every typo)."""
    import train

    _no_wandb(monkeypatch)
    monkeypatch.chdir(tmp_path)  # Hydra's default outputs/<date>/<time>, and its parents
    monkeypatch.setattr(Host, "probe", classmethod(lambda cls: CPU_BOX))
    monkeypatch.setattr("device.host.gpu_count", lambda: CPU_BOX.gpus)
    monkeypatch.setattr(
        sys, "argv", ["train.py", "batch_size=0", "logger=wandb", "logger.mode=offline"]
    )
    assert train.main() == 2
    assert capsys.readouterr().err.strip().splitlines()[-1] == "error: batch_size=0: must be >= 1."
    assert list(tmp_path.iterdir()) == []


def test_a_refused_job_of_a_sweep_keeps_its_row_and_opens_no_wandb_run(tmp_path, monkeypatch):
    from job.run import run_job

    _no_wandb(monkeypatch)
    monkeypatch.setattr(Host, "probe", classmethod(lambda cls: CPU_BOX))
    out = tmp_path / "sweep" / "0"
    out.mkdir(parents=True)
    job = {
        "name": "train",
        "num": 0,
        "output_dir": str(out),
        "sweep_dir": str(out.parent),
        "overrides": ["batch_size=0"],
        "command": "python train.py batch_size=0",
        "multirun": True,
    }
    result = run_job(compose(["batch_size=0", "logger=wandb", "logger.mode=offline"]), job=job)
    assert result.status == "failed" and "batch_size=0: must be >= 1" in result.error
    rec = read(out)  # the sweep table's row, in the sweep's own directory
    assert rec["status"] == "failed" and rec["error"] == "ConfigError: batch_size=0: must be >= 1."


@pytest.mark.subprocess
def test_a_sweep_refused_as_a_whole_exits_2_and_creates_nothing(tmp_path):
    """Issue 19.9: -m repeats=0 exited 1, printed `[sweep] ? jobs` and left an empty sweep
    directory."""
    proc = run_train(["repeats=0", "logger=none"], tmp_path, multirun=True)
    assert proc.returncode == 2 and proc.stderr.strip().splitlines() == [
        "error: repeats=0: must be a whole number of runs per configuration >= 1, e.g. repeats=3, "
        "or repeats=auto (planned to compare.target)."
    ]
    assert "[sweep]" not in proc.stdout and not proc.out_dir.exists()


# ---------------------------------------------------------------------------- host-dependent checks
def test_gpu_only_knobs_refused_without_gpu_whatever_this_machine_has():
    assert "backend=nccl needs CUDA GPUs" in refused(["backend=nccl"], host=CPU_BOX)
    assert "cuda_graphs=true needs a CUDA GPU" in refused(["cuda_graphs=true"], host=CPU_BOX)
    assert "no GPU is visible" in refused(
        ["task=collectives", "collectives.device=cuda"], host=CPU_BOX
    )
    assert "no GPU is visible" in refused(["task=grad_sync", "grad_sync.device=cuda"], host=CPU_BOX)


def test_pair_groups_on_one_gpu_under_auto_runs_on_gloo():
    """backend=auto picks gloo when the ranks cannot have a GPU each, so NCCL's one-GPU-per-rank
    rule is not the one to apply (it refused the default pairs=1 on a 1-GPU box)."""
    assert accepted(["task=pair_groups"], host=ONE_GPU)["world_size"] == 2
    assert (
        "backend=nccl with pairs=1 runs 2 ranks on this machine, one GPU per rank, and it has 1. "
        "Use pairs<=0" in refused(["task=pair_groups", "backend=nccl"], host=ONE_GPU)
    )


def test_train_refuses_more_ranks_or_memory_than_the_host_holds_unless_told():
    assert "(at most 16 ranks here)" in refused(["world_size=64"])
    assert "oversubscribe=true" in refused(["world_size=64"])
    accepted(["world_size=64", "oversubscribe=true"])
    small = Host(gpus=0, cpus=64, free_bytes=8 * GIB, gpu_free_bytes=None)
    message = refused(
        ["world_size=8"], host=small
    )  # VGG11: 4 fp32 copies of 471 MiB + a process each
    assert "8 ranks need about" in message and "8.0 GiB is available (room for 3)" in message
    accepted(["world_size=8", "model=vgg11_tiny"], host=small)
    accepted(["world_size=8", "oversubscribe=true"], host=small)


def test_ranks_that_outnumber_the_cores_are_said_once_before_they_start():
    """Issue 19.11: world_size=3 on 2 cores started silently. One line (base/log.py formats
    ConfigWarning as
    `warning: ...`), before any rank starts; as many ranks as cores, or ranks on GPUs, say
    nothing."""
    import warnings

    from base.errors import ConfigWarning
    import base.log  # noqa: F401 - installs the one-line format

    with pytest.warns(
        ConfigWarning,
        match="world_size=3: 3 ranks on this machine's 2 CPU cores, more ranks than cores",
    ) as caught:
        accepted(["world_size=3", "model=vgg11_tiny"])
    assert len([w for w in caught if issubclass(w.category, ConfigWarning)]) == 1
    line = warnings.formatwarning(
        caught[0].message, caught[0].category, caught[0].filename, caught[0].lineno
    )
    assert line.startswith("warning: world_size=3") and line.count("\n") == 1
    with warnings.catch_warnings():
        warnings.simplefilter("error", ConfigWarning)
        accepted(["model=vgg11_tiny"])  # 2 ranks, 2 cores


def test_already_started_ranks_are_accepted_at_any_world_size():
    torchrun_rank = dataclasses.replace(CPU_BOX, free_bytes=GIB, ranks_started=True)
    accepted(["world_size=64"], host=torchrun_rank)


# issue 10: on a GPU-less Slurm login node these were refused for the login node's GPUs and memory
SUBMITTED = [
    ["launcher=slurm_16x1", "task=collectives", "backend=nccl", "collectives.device=cuda"],
    ["launcher=slurm_16x1", "task=pair_groups", "backend=nccl", "pairs=8"],
    ["launcher=slurm_16x1", "task=collectives", "collectives.max_bytes=8G"],
    ["launcher=slurm_16x1", "task=grad_sync", "model=vit_l_32"],
]


@pytest.mark.parametrize("overrides", SUBMITTED, ids=[" ".join(o) for o in SUBMITTED])
def test_submitting_from_a_gpu_less_login_node_is_accepted(overrides):
    accepted(overrides, host=LOGIN_NODE, submitting=True)


def test_a_slurm_submission_resolves_scale_auto_for_the_nodes_it_asks_for(recwarn):
    """Issue 19.6: ${gpu_or:...} counted the GPU-less login node's GPUs, so a GPU job was checked
    with CPU values (warm-up 2, steps 6 then, max_steps 60): steps=100 and optim.start_iter=10 were
    refused, and a false warm-up warning printed. The nodes' GPUs are what launcher.gpus_per_node
    (or launcher.gres) asks for."""
    gpu_job = ["launcher=slurm", "launcher.gpus_per_node=1"]
    plain = accepted(gpu_job, host=LOGIN_NODE, submitting=True)
    assert (
        plain["warmup_steps"],
        plain["steps"],
        plain["measure"]["max_steps"],
        plain["batch_size"],
    ) == (11, 50, 500, 128)
    assert not [w for w in recwarn if "warmup_steps" in str(w.message)]
    accepted([*gpu_job, "steps=100"], host=LOGIN_NODE, submitting=True)
    accepted([*gpu_job, "optim=powersgd", "optim.start_iter=10"], host=LOGIN_NODE, submitting=True)
    assert (
        accepted(["launcher=slurm", "launcher.gres=gpu:a100:8"], host=LOGIN_NODE, submitting=True)[
            "steps"
        ]
        == 50
    )
    # a CPU job (no GPUs asked) keeps the CPU values, on the login node and in the job alike
    cpu = accepted(["launcher=slurm"], host=LOGIN_NODE, submitting=True)
    assert (cpu["warmup_steps"], cpu["measure"]["max_steps"]) == (2, 60) and cpu["steps"] < 50
    assert "max_steps=60 < steps=100" in refused(
        ["launcher=slurm", "steps=100"], host=LOGIN_NODE, submitting=True
    )
    assert accepted([], host=CPU_BOX)["warmup_steps"] == 2  # a local run still reads this machine


def test_submitting_counts_memory_per_node():
    cpu_buffers = [
        "launcher=slurm_16x1",
        "task=collectives",
        "collectives.max_bytes=8G",
        "collectives.device=cpu",
    ]
    accepted(cpu_buffers, host=LOGIN_NODE, submitting=True)  # one rank per node, memory unknown
    assert "launcher.mem_gb=4" in refused(
        [*cpu_buffers, "launcher.mem_gb=4"], host=LOGIN_NODE, submitting=True
    )
    assert "collectives.max_bytes=8G: 2 ranks need about 17.5 GiB" in refused(
        cpu_buffers[1:], host=LOGIN_NODE
    )
    assert "pairs=4 needs 8 ranks and this run has world_size=16" in refused(
        ["launcher=slurm_16x1", "task=pair_groups", "pairs=4"], host=LOGIN_NODE, submitting=True
    )


# ---------------------------------------------------------------------------------- the entry point
def test_help_lists_tasks_groups_and_examples(monkeypatch, capsys):
    import train

    monkeypatch.setattr(sys, "argv", ["train.py", "--help"])
    code = train.main()
    out = capsys.readouterr().out
    assert code == 0 and len(out.splitlines()) < 60
    users = [t for t in tasks.TASKS if t not in tasks.MAINTAINER_TASKS]
    assert tasks.MAINTAINER_TASKS and not any(
        t in out for t in tasks.MAINTAINER_TASKS
    )  # issue 25: users' tasks only
    assert "harness_cost" not in out
    for word in [
        *users,
        *(
            c
            for g in ("model", "data", "optim", "scale", "logger", "experiment")
            for c in choices(g)
        ),
        "python train.py -m optim=bf16,powersgd bucket=25,100,2000",
    ]:
        assert word in out, word


def test_help_alone_is_answered_before_hydra_composes(monkeypatch, capsys):
    """Issue 36: `--help` alone never reaches Hydra's app_help (its listing of every group's
    options, ~2.4 CPU s, for variables our template does not use), and says byte for byte what
    Hydra says: with an override, Hydra answers from the same template."""
    import hydra._internal.hydra as hydra_internal

    import train

    monkeypatch.setattr(sys, "argv", ["train.py", "logger=none", "--help"])
    assert train.main() == 0
    hydras = capsys.readouterr().out

    def composed(*args, **kwargs):
        raise AssertionError("--help alone went to Hydra's app_help")

    monkeypatch.setattr(hydra_internal.Hydra, "app_help", composed)
    for flag in ("--help", "-h"):
        monkeypatch.setattr(sys, "argv", ["train.py", flag])
        assert train.main() == 0
        assert capsys.readouterr().out == hydras, flag
    monkeypatch.setattr(sys, "argv", ["train.py", "logger=none", "--help"])
    with pytest.raises(AssertionError, match="app_help"):  # an override: Hydra's, as before
        train.main()


@pytest.mark.subprocess
def test_typo_and_unknown_choice_from_the_command_line(tmp_path):
    """Real processes: Hydra's multi-line errors (and its `+bukcet=100` advice) become one line,
    exit 2, for a single run and for a -m sweep before its first job."""
    proc = run_train(["bukcet=100", "logger=none"], tmp_path)
    assert (
        proc.returncode == 2
        and proc.stderr.strip() == "error: bukcet: no such key. Did you mean bucket=100?"
    )
    proc = run_train(["optim=bf16,nope", "logger=none"], tmp_path, multirun=True)
    assert proc.returncode == 2 and proc.stderr.strip().splitlines() == [
        "error: optim=nope is not an option of optim; choose one of: bf16, fp16, none, powersgd. "
        "Did you mean optim=none?"
    ]
    assert not list(Path(proc.out_dir).glob("*/run_record.json"))


def test_preset_without_m_is_refused(tmp_path):
    proc = train_main(["experiment=ddp_overhead", "logger=none"], tmp_path)
    assert proc.returncode == 2
    assert (
        "experiment=ddp_overhead is a sweep (sync=local,ddp) and needs -m: python train.py -m "
        "experiment=ddp_overhead logger=none" in proc.stderr
    )


def test_raw_folder_errors_print_the_generator(tmp_path: Path):
    missing = tmp_path / "nowhere"
    message = refused(["data=raw_folder", f"data.root={missing}"])
    assert "does not exist" in message and "python -m data.make_raw_folder" in message
    (tmp_path / "empty" / "class_0").mkdir(parents=True)
    assert "holds no sample files" in refused(
        ["data=raw_folder", f"data.root={tmp_path / 'empty'}"]
    )
    bad = tmp_path / "bad" / "class_0"
    bad.mkdir(parents=True)
    (bad / "x.raw").write_bytes(b"\0" * 1000)
    message = refused(["data=raw_folder", f"data.root={tmp_path / 'bad'}"])
    assert "x.raw has 1000 bytes" in message and "602112 bytes" in message
