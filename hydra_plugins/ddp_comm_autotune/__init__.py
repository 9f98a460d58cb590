"""experiment=autotune's sweeper: hydra-optuna-sweeper's study, then a selection stage (the default and the top
candidates re-measured in rounds) and a confirmation stage (the selected candidate against the default on fresh runs),
through the same launcher (local or Slurm): the winner is chosen on repeated runs rather than on the luckiest search
sample, and judged on runs that did not choose it (results/autotune.py).

It lives where Hydra looks for plugins (see hydra_plugins/slurm_sweep_launcher) and takes exactly the optuna sweeper's
settings (conf/experiment/autotune.yaml overrides only its _target_), so every documented hydra.sweeper.* knob of
hydra-optuna-sweeper works; the confirmation settings are the preset's `autotune.*`. Optuna is imported only when
this sweeper runs, so the rest of the tool does not need it. The reading of records is results/autotune.py."""
from __future__ import annotations

import inspect
import logging
from pathlib import Path
from typing import Any

from hydra.plugins.sweeper import Sweeper
from omegaconf import DictConfig, OmegaConf

_OPTUNA_LOG = "hydra_plugins.hydra_optuna_sweeper._impl"


class _HideSearchBest(logging.Filter):
    """The optuna sweeper logs the study's best value: the maximum of noisy samples, not an answer to print."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith(("Best parameters", "Best value"))


class AutotuneSweeper(Sweeper):
    def __init__(self, **optuna_settings: Any) -> None:
        from hydra_plugins.hydra_optuna_sweeper.config import OptunaSweeperConf
        from hydra_plugins.hydra_optuna_sweeper.optuna_sweeper import OptunaSweeper

        # conf/config.yaml selects hydra/sweeper=repeating for every run, and the primary config's group choice wins
        # over a preset's, so this node arrives as repeating's keys plus the preset's: keep OptunaSweeper's arguments,
        # with the Optuna plugin's defaults (TPE sampler) for those the preset leaves out
        conf = OmegaConf.to_container(OmegaConf.structured(OptunaSweeperConf))
        kwargs = {k: optuna_settings.get(k, conf.get(k)) for k in inspect.signature(OptunaSweeper).parameters}
        sampler = kwargs["sampler"]
        if sampler is None or isinstance(sampler, (dict, DictConfig)):  # Hydra instantiates a node with a _target_
            from hydra.utils import instantiate

            settings = OmegaConf.to_container(OmegaConf.create(sampler or {}))
            kwargs["sampler"] = instantiate({"_target_": "optuna.samplers.TPESampler", **settings})
        self.study = OptunaSweeper(**kwargs)
        self.config = None

    def setup(self, *, hydra_context, task_function, config) -> None:
        self.study.setup(hydra_context=hydra_context, task_function=task_function, config=config)
        self.config = config

    def sweep(self, arguments: list[str]) -> None:
        from hydra_plugins.hydra_optuna_sweeper._impl import create_params_from_overrides

        import stats
        from results import autotune
        from results.sweep import sweep_entries

        impl = self.study.sweeper
        hide = _HideSearchBest()
        logging.getLogger(_OPTUNA_LOG).addFilter(hide)
        try:
            self.study.sweep(arguments)
        finally:
            logging.getLogger(_OPTUNA_LOG).removeFilter(hide)

        # the search space and the fixed overrides, as the optuna sweeper split them
        space, fixed = create_params_from_overrides(
            [f"{k}={v}" for k, v in (impl.params or {}).items()] + list(arguments))
        keys = list(space)
        defaults = {k: self._default(k) for k in keys}
        sweep_dir = Path(str(self.config.hydra.sweep.dir))
        searched = impl.job_idx
        search = [e for e in sweep_entries(sweep_dir) if e.num is not None and e.num < searched]
        settings = OmegaConf.select(self.config, "autotune")
        top = autotune.top_candidates(search, keys, defaults, int(settings.top_k))
        candidates = [autotune.default_candidate(keys, defaults, search), *top]
        if not top:
            print("[autotune] no search trial other than the default config finished: nothing to confirm", flush=True)
            return
        seed = int(OmegaConf.select(self.config, "hydra.sweeper.sampler.seed", default=0) or 0)
        fixed_args = [f"{k}={v}" for k, v in fixed.items()]
        plan = autotune.stage_plan(candidates, fixed_args, int(settings.repeats), autotune.SELECT, seed)
        print(f"[autotune] search done ({searched} trials). Selecting: the default and the top {len(top)} "
              f"candidate(s), {settings.repeats} runs each in rounds (jobs {searched}-{searched + len(plan) - 1}):"
              + "".join(f"\n  {c.label}{' (default)' if i == 0 else ''}" for i, c in enumerate(candidates)),
              flush=True)
        impl.job_idx += len(impl.launcher.launch(plan, initial_job_idx=impl.job_idx))
        staged = [e for e in sweep_entries(sweep_dir) if e.num is not None and e.num >= searched]
        noise = float(OmegaConf.select(self.config, "compare.noise", default=stats.NOISE))
        chosen = autotune.select(staged, candidates, noise=noise)["chosen"]
        confirm: list = []
        if chosen is not None:
            first = impl.job_idx
            pick = next(c for c in candidates if c.label == chosen)
            plan = autotune.stage_plan([candidates[0], pick], fixed_args, int(settings.repeats), autotune.CONFIRM,
                                       seed + 1)
            print(f"[autotune] selected {chosen}; confirming it against the default on {len(plan)} fresh runs "
                  f"(jobs {first}-{first + len(plan) - 1}): the runs that picked it do not judge it", flush=True)
            impl.job_idx += len(impl.launcher.launch(plan, initial_job_idx=first))
            confirm = [e for e in sweep_entries(sweep_dir) if e.num is not None and e.num >= first]
        result = autotune.conclude(staged, candidates, noise=noise, search_trials=searched, confirm=confirm)
        autotune.write(sweep_dir, result)
        print(f"\n{autotune.markdown(result)}", flush=True)

    def _default(self, key: str) -> Any:
        """The searched key's value in the config without the search: a group's chosen option, else the value."""
        choices = OmegaConf.select(self.config, "hydra.runtime.choices") or {}
        if key in choices:
            return choices[key]
        return OmegaConf.select(self.config, key)
