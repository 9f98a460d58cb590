"""Every composed config, written out, to show that moving where values live changes none of them.

    python -m tests.config_snapshot > /tmp/before.txt    # on the old tree
    python -m tests.config_snapshot > /tmp/after.txt     # on the new one; then diff them

Composes (Hydra's compose API, hydra.* left out as `--cfg job` leaves it) the default, each group
option, the tasks, the launchers, and every job of the presets' sweeps and of a typed -m sweep: as
composed (`--cfg job`'s view), resolved on this host, and each node's type. `--cli` adds real
`python train.py --cfg job` runs of a few override sets.
"""

from __future__ import annotations

import itertools
import subprocess
import sys
from pathlib import Path

from omegaconf import OmegaConf

ROOT = Path(__file__).resolve().parent.parent
CONF = ROOT / "conf"

SETS = [
    [],
    ["scale=smoke"],
    ["task=collectives"],
    ["task=grad_sync"],
    ["task=pair_groups", "pairs=2"],
    ["task=script", "script.path=examples/plain_ddp.py"],
    ["launcher=slurm"],
    ["launcher=slurm", "launcher.gpus_per_node=2", "launcher.nodes=2"],
    ["launcher=slurm_16x1"],
    ["launcher=slurm_1x8"],
    ["logger=none", "bucket=25", "ddp.static_graph=true", "measure.policy=adaptive"],
]
SWEEPS = [["optim=bf16,powersgd", "bucket=25,100,2000", "scale=smoke"]]  # a typed -m run


def _options(group: str) -> list[str]:
    return sorted(p.stem for p in (CONF / group).glob("*.yaml"))


def _compose(overrides: list[str], hydra: bool = False):
    from hydra import compose, initialize_config_dir

    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        return compose(config_name="config", overrides=overrides, return_hydra_config=hydra)


def _jobs(sweep: list[str]) -> list[list[str]]:
    """A -m command line's jobs: the product of its comma lists and the preset's sweeper params."""
    cfg = _compose([o for o in sweep if "," not in o], hydra=True)
    params = cfg.hydra.sweeper.get("params")
    params = OmegaConf.to_container(params, resolve=False) if params else {}
    typed = [o.split("=", 1) for o in sweep]
    axes = {k: v.split(",") for k, v in typed} | {
        k: str(v).split(",") for k, v in params.items() if "(" not in str(v)
    }  # optuna's search spaces (autotune) are left out: the preset itself is composed
    keys = list(axes)
    return [[f"{k}={v}" for k, v in zip(keys, row)] for row in itertools.product(*axes.values())]


def _types(node, path: str):
    """Every node's OmegaConf type, schema type (ref_type), element type and optionality: what a
    value typed on the command line is checked against."""
    from omegaconf import DictConfig, ListConfig

    items = node.items_ex(resolve=False) if isinstance(node, DictConfig) else enumerate(node)
    for key, _ in items:
        child = node._get_node(key)
        meta = child._metadata
        ref = getattr(meta.ref_type, "__name__", meta.ref_type)
        elem = getattr(meta, "element_type", None)
        yield f"{path}{key}: {type(child).__name__} ref={ref} elem={elem} optional={meta.optional}"
        if (
            isinstance(child, (DictConfig, ListConfig))
            and not child._is_none()
            and not child._is_missing()
        ):
            yield from _types(child, f"{path}{key}.")


def _show(overrides: list[str]) -> str:
    from job.config import register_resolvers

    register_resolvers()
    cfg = _compose(overrides)
    composed = OmegaConf.to_yaml(cfg)
    try:
        resolved = OmegaConf.to_yaml(cfg, resolve=True)
    except Exception as e:
        resolved = f"does not resolve: {type(e).__name__}: {str(e).splitlines()[0]}\n"
    types = "\n".join(_types(cfg, ""))
    title = " ".join(overrides) or "(default)"
    return f"=== {title}\n{composed}--- resolved\n{resolved}--- types\n{types}\n"


def main(argv: list[str]) -> None:
    sets = list(SETS)
    for group in ("model", "data", "optim", "scale", "logger", "link", "launcher", "variant"):
        sets += [[f"{group}={o}"] for o in _options(group)]
    for preset in _options("experiment"):
        sets += [[f"experiment={preset}"]]
        sets += _jobs([f"experiment={preset}", "scale=smoke"])
    for sweep in SWEEPS:
        sets += _jobs(sweep)
    for overrides in sets:
        sys.stdout.write(_show(overrides))
    if "--cli" in argv:
        for overrides in (
            [],
            ["scale=smoke"],
            ["task=collectives"],
            ["launcher=slurm"],
            [
                "experiment=scaling",
                "world_size=2",
            ],  # --cfg refuses -m: the sweeps' jobs are composed above
        ):
            out = subprocess.run(
                [sys.executable, "train.py", "--cfg", "job", *overrides],
                cwd=ROOT,
                capture_output=True,
                text=True,
                env={"OMP_NUM_THREADS": "1", "WANDB_MODE": "disabled", "PATH": "/usr/bin:/bin"},
            )
            sys.stdout.write(f"=== cli {' '.join(overrides)}\n{out.stdout}{out.stderr}")


if __name__ == "__main__":
    main(sys.argv[1:])
