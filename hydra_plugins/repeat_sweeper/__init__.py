"""The project's sweeper where Hydra looks for plugins (the hydra_plugins namespace package). The logic lives in
core/sweep.py; conf/hydra/sweeper/repeating.yaml selects it."""
from core.sweep import RepeatingSweeper as _RepeatingSweeper


class RepeatingSweeper(_RepeatingSweeper):
    pass
