"""Every config choice composes and resolves; every bad input is refused before any rank starts, naming the fix."""
from pathlib import Path

import pytest

from core.config import prepare
from core.errors import ConfigError
from tests.conftest import CONF, compose


def choices(group: str) -> list[str]:
    return sorted(p.stem for p in (CONF / group).glob("*.yaml"))


@pytest.mark.parametrize("group", ["model", "data", "optim", "scale", "launcher", "logger", "variant"])
def test_every_group_choice_composes(group):
    for choice in choices(group):
        cfg = compose([f"{group}={choice}"])
        assert cfg is not None


@pytest.mark.parametrize("experiment", choices("experiment"))
def test_every_experiment_composes_and_resolves(experiment):
    cfg = compose([f"experiment={experiment}", "scale=smoke"])
    assert "tags" in cfg and cfg.tags
    plain = prepare(cfg)
    assert plain["model"]["name"] == "vit_l_32" and plain["batch_size"] == 2  # command-line scale wins


def test_defaults_are_the_thread_setting_on_this_machine():
    plain = prepare(compose())
    assert plain["model"]["name"] == "vgg11" and plain["data"]["image_size"] == 224
    assert plain["sync"] == "ddp" and plain["bucket"] == 25 and plain["world_size"] >= 1


def test_pair_groups_sets_world_size_from_pairs():
    assert prepare(compose(["task=pair_groups", "pairs=3"]))["world_size"] == 6


BAD = [
    (["sync=allgather"], "sync='allgather' is not known; choose one of: ddp, per_param, flat, local"),
    (["backend=mpi"], "backend='mpi' is not known"),
    (["task=nope"], "task='nope' is not known"),
    (["batch_size=0"], "batch_size=0: must be a positive number"),
    (["steps=-1"], "steps=-1: must be a positive number"),
    (["bucket=0"], "bucket=0: must be a positive number"),
    (["accumulate=0"], "accumulate=0: must be a positive number"),
    (["world_size=0"], "world_size=0"),
    (["h2d=magic"], "h2d='magic' is not known"),
    (["precision=fp8"], "precision='fp8' is not known"),
    (["optim=bf16", "sync=per_param"], "needs sync=ddp"),
    (["optim=powersgd", "optim.rank=0"], "matrix approximation rank must be an integer >= 1"),
    (["optim=powersgd", "optim.start_iter=1"], "optim.start_iter must be > 1"),
    (["optim=powersgd", "optim.min_compression_rate=-1"], "min_compression_rate"),
    (["optim=powersgd", "warmup_steps=1"], "1 measured step(s) would not be PowerSGD at all"),
]


@pytest.mark.parametrize("overrides,message", BAD, ids=[" ".join(o) for o, _ in BAD])
def test_bad_input_names_problem_and_fix(overrides, message):
    with pytest.raises(ConfigError, match=None) as e:
        prepare(compose(overrides))
    assert message in str(e.value)


@pytest.mark.skipif(__import__("torch").cuda.is_available(), reason="checks the no-GPU errors")
def test_gpu_only_knobs_refused_without_gpu():
    with pytest.raises(ConfigError, match="backend=nccl needs CUDA GPUs"):
        prepare(compose(["backend=nccl"]))
    with pytest.raises(ConfigError, match="cuda_graphs=true cannot capture this run:\n  - the ranks run on CPU"):
        prepare(compose(["cuda_graphs=true"]))


def test_raw_folder_errors_print_the_generator(tmp_path: Path):
    missing = tmp_path / "nowhere"
    with pytest.raises(ConfigError) as e:
        prepare(compose(["data=raw_folder", f"data.root={missing}"]))
    assert "does not exist" in str(e.value) and "python -m data.make_raw_folder" in str(e.value)
    (tmp_path / "empty" / "class_0").mkdir(parents=True)
    with pytest.raises(ConfigError, match="holds no sample files"):
        prepare(compose(["data=raw_folder", f"data.root={tmp_path / 'empty'}"]))
    bad = tmp_path / "bad" / "class_0"
    bad.mkdir(parents=True)
    (bad / "x.raw").write_bytes(b"\0" * 1000)
    with pytest.raises(ConfigError) as e:
        prepare(compose(["data=raw_folder", f"data.root={tmp_path / 'bad'}"]))
    assert "x.raw has 1000 bytes" in str(e.value) and "602112 bytes" in str(e.value)
