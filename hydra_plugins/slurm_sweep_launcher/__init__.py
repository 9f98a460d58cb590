"""This project's Slurm launcher configs, where Hydra finds plugins (the hydra_plugins namespace
package, which this directory joins when the repository root is on sys.path, as it is for train.py,
the tests and the Slurm jobs).

  hydra/launcher=slurm_sweep     SlurmLauncher below (its logic: launcher.py beside this file;
                                 Hydra instantiates launchers only from this package), no settings
                                 of its own: every Slurm setting lives in launcher.*;
                                 conf/launcher/slurm.yaml selects it.
  hydra/launcher=submitit_slurm  hydra-submitit-launcher's choice name, answered by the same
                                 launcher, so a user's habitual `-m hydra/launcher=submitit_slurm
                                 ...` is refused before anything is submitted, with the equivalent
                                 launcher=slurm command, instead of running the stock plugin.
"""

from hydra.core.config_search_path import ConfigSearchPath
from hydra.core.config_store import ConfigStore
from hydra.plugins.search_path_plugin import SearchPathPlugin

from hydra_plugins.slurm_sweep_launcher.launcher import SlurmSweepLauncher
from job.config import register_resolvers

LAUNCHER = "hydra_plugins.slurm_sweep_launcher.SlurmLauncher"

# conf/launcher/slurm.yaml interpolates ${mul:...} and ${or:...}. Hydra imports this module before
# composing, and a Slurm task imports it when it unpickles the launcher, before loading its job's
# config.
register_resolvers()
ConfigStore.instance().store(
    group="hydra/launcher",
    name="slurm_sweep",
    node={"_target_": LAUNCHER},
    provider="slurm_sweep_launcher",
)


class SubmititSlurmAnswered(SearchPathPlugin):
    """Registers hydra/launcher=submitit_slurm after Hydra's plugin scan: the scan re-executes every
    plugin module, so the stock plugin's registration would replace one made at import time whenever
    it is scanned after this one. Hydra calls search-path plugins after the scan and before
    composing; the search path itself is left as it is."""

    def manipulate_search_path(self, search_path: ConfigSearchPath) -> None:
        from hydra_plugins.hydra_submitit_launcher.config import SlurmQueueConf

        ConfigStore.instance().store(
            group="hydra/launcher",
            name="submitit_slurm",
            node=SlurmQueueConf(_target_=LAUNCHER),
            provider="slurm_sweep_launcher",
        )


class SlurmLauncher(SlurmSweepLauncher):
    pass
