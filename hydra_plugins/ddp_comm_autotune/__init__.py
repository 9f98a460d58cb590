"""experiment=autotune's sweeper: hydra-optuna-sweeper's study, then a selection stage (the default
and the top candidates re-measured in rounds) and a confirmation stage (the selected candidate
against the default on fresh runs), through the same launcher (local or Slurm): the winner is chosen
on repeated runs rather than on the luckiest search sample, and judged on runs that did not choose
it (results/autotune.py).

It lives where Hydra looks for plugins (see hydra_plugins/slurm_sweep_launcher) and takes exactly
the optuna sweeper's settings (conf/experiment/autotune.yaml overrides only its _target_), so every
documented hydra.sweeper.* knob of hydra-optuna-sweeper works; the confirmation settings are the
preset's `autotune.*`. Optuna is imported only when this sweeper runs, so the rest of the tool does
not need it. The reading of records is results/autotune.py."""

from __future__ import annotations

import inspect
import logging
from pathlib import Path
from typing import Any

from hydra.plugins.sweeper import Sweeper
from omegaconf import DictConfig, OmegaConf

_OPTUNA_LOG = "hydra_plugins.hydra_optuna_sweeper._impl"


class _HideSearchBest(logging.Filter):
    """The optuna sweeper logs the study's best value: the maximum of noisy samples, not an answer
    to print."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith(("Best parameters", "Best value"))


class _PruningLauncher:
    """The search's launcher, less the trials the what-if model rules out (results.autotune.Pruner):
    those are not launched, and the search is told the model's upper bound on their samples/s as
    their value."""

    def __init__(self, launcher, pruner) -> None:
        self.launcher, self.pruner = launcher, pruner

    def launch(self, job_overrides, initial_job_idx: int):
        from hydra.core.utils import JobReturn, JobStatus

        verdicts = [self.pruner.rules_out(list(o)) for o in job_overrides]
        run = [o for o, v in zip(job_overrides, verdicts) if v is None]
        done = iter(self.launcher.launch(run, initial_job_idx=initial_job_idx) if run else [])
        out = []
        for o, v in zip(job_overrides, verdicts):
            if v is None:
                out.append(next(done))
            else:
                print(
                    f"[autotune] skipped (the what-if model rules it out): {' '.join(o)}: "
                    "predicted "
                    f"{v['speed-up']:.2f}x [{v['speed-up CI'][0]:.2f}, {v['speed-up CI'][1]:.2f}] "
                    "of the default",
                    flush=True,
                )
                out.append(
                    JobReturn(
                        overrides=list(o), status=JobStatus.COMPLETED, _return_value=v["objective"]
                    )
                )
        return out

    def __getattr__(self, name):
        return getattr(self.launcher, name)


class AutotuneSweeper(Sweeper):
    def __init__(self, **optuna_settings: Any) -> None:
        from hydra_plugins.hydra_optuna_sweeper.config import OptunaSweeperConf
        from hydra_plugins.hydra_optuna_sweeper.optuna_sweeper import OptunaSweeper

        # conf/config.yaml selects hydra/sweeper=repeating for every run, and the primary config's
        # group choice wins over a preset's, so this node arrives as repeating's keys plus the
        # preset's: keep OptunaSweeper's arguments, with the Optuna plugin's defaults (TPE sampler)
        # for those the preset leaves out
        conf = OmegaConf.to_container(OmegaConf.structured(OptunaSweeperConf))
        kwargs = {
            k: optuna_settings.get(k, conf.get(k))
            for k in inspect.signature(OptunaSweeper).parameters
        }
        sampler = kwargs["sampler"]
        if sampler is None or isinstance(
            sampler, (dict, DictConfig)
        ):  # Hydra instantiates a node with a _target_
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
        from tables.sweep import sweep_entries

        impl = self.study.sweeper
        # the search space and the fixed overrides, as the optuna sweeper splits them
        space, fixed = create_params_from_overrides(
            [f"{k}={v}" for k, v in (impl.params or {}).items()] + list(arguments)
        )
        keys = list(space)
        defaults = {k: self._default(k) for k in keys}
        sweep_dir = Path(str(self.config.hydra.sweep.dir))
        settings = OmegaConf.select(self.config, "autotune")
        noise = float(OmegaConf.select(self.config, "compare.noise", default=stats.NOISE))
        fixed_args = [f"{k}={v}" for k, v in fixed.items()]
        pruner = None
        if settings.get("prune", True):
            # the default config once, with what the what-if model needs (the on-rank
            # microbenchmark): every trial the search proposes is predicted from it, and those it
            # rules out with confidence never run
            default = autotune.default_candidate(keys, defaults)
            first = impl.job_idx
            print(
                f"[autotune] the default config once (job {first}), for the what-if model to rule "
                "out trials "
                "before they run",
                flush=True,
            )
            impl.job_idx += len(
                impl.launcher.launch(
                    [
                        [
                            *fixed_args,
                            f"{autotune.STAGE_KEY}={autotune.MODEL}",
                            "diagnose.microbench=true",
                            *default.overrides,
                        ]
                    ],
                    initial_job_idx=first,
                )
            )
            model_run = next((e for e in sweep_entries(sweep_dir) if e.num == first), None)
            pruner = autotune.Pruner(model_run, keys, defaults, noise)
            if pruner.why:
                print(f"[autotune] no trial will be skipped: {pruner.why}", flush=True)
            impl.launcher = _PruningLauncher(impl.launcher, pruner)
        started = impl.job_idx
        hide = _HideSearchBest()
        logging.getLogger(_OPTUNA_LOG).addFilter(hide)
        try:
            self.study.sweep(arguments)
        finally:
            logging.getLogger(_OPTUNA_LOG).removeFilter(hide)
            if pruner is not None:
                impl.launcher = impl.launcher.launcher
        searched = impl.job_idx
        search = [e for e in sweep_entries(sweep_dir) if e.num is not None and e.num < searched]
        top = autotune.top_candidates(search, keys, defaults, int(settings.top_k))
        candidates = [autotune.default_candidate(keys, defaults, search), *top]
        if not top:
            result = autotune.nothing_to_select(
                candidates[0],
                searched - started,
                noise,
                pruner.summary() if pruner is not None else None,
            )
            autotune.write(sweep_dir, result)
            print(f"[autotune] {result['conclusion']}", flush=True)
            return
        seed = int(OmegaConf.select(self.config, "hydra.sweeper.sampler.seed", default=0) or 0)
        plan = autotune.stage_plan(
            candidates, fixed_args, int(settings.repeats), autotune.SELECT, seed
        )
        skipped = len(pruner.skipped) if pruner is not None else 0
        print(
            f"[autotune] search done ({searched - started} trials, {skipped} skipped by the "
            "model). Selecting: the "
            f"default and the top {len(top)} candidate(s), {settings.repeats} runs each in rounds "
            f"(jobs {searched}-{searched + len(plan) - 1}):"
            + "".join(
                f"\n  {c.label}{' (default)' if i == 0 else ''}" for i, c in enumerate(candidates)
            ),
            flush=True,
        )
        impl.job_idx += len(impl.launcher.launch(plan, initial_job_idx=impl.job_idx))
        staged = [e for e in sweep_entries(sweep_dir) if e.num is not None and e.num >= searched]
        chosen = autotune.select(staged, candidates, noise=noise)["chosen"]
        confirm: list = []
        if chosen is not None:
            first = impl.job_idx
            pick = next(c for c in candidates if c.label == chosen)
            plan = autotune.stage_plan(
                [candidates[0], pick], fixed_args, int(settings.repeats), autotune.CONFIRM, seed + 1
            )
            print(
                f"[autotune] selected {chosen}; confirming it against the default on {len(plan)} "
                "fresh runs "
                f"(jobs {first}-{first + len(plan) - 1}): the runs that picked it do not judge it",
                flush=True,
            )
            impl.job_idx += len(impl.launcher.launch(plan, initial_job_idx=first))
            confirm = [e for e in sweep_entries(sweep_dir) if e.num is not None and e.num >= first]
        result = autotune.conclude(
            staged,
            candidates,
            noise=noise,
            search_trials=searched - started,
            confirm=confirm,
            model=pruner.summary() if pruner is not None else None,
        )
        autotune.write(sweep_dir, result)
        print(f"\n{autotune.markdown(result)}", flush=True)

    def _default(self, key: str) -> Any:
        """The searched key's value in the config without the search: a group's chosen option, else
        the value."""
        choices = OmegaConf.select(self.config, "hydra.runtime.choices") or {}
        if key in choices:
            return choices[key]
        return OmegaConf.select(self.config, key)
