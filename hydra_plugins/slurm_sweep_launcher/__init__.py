"""The project's Slurm launcher where Hydra looks for launchers (plugins must live in the hydra_plugins namespace
package; this directory joins it when the repository root is on sys.path, as it is for train.py and in Slurm jobs).
The logic lives in launchers/slurm.py; conf/launcher/slurm.yaml selects it as hydra.launcher._target_."""
from launchers.slurm import SweepSafeSlurmLauncher


class SlurmLauncher(SweepSafeSlurmLauncher):
    pass
