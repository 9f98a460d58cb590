"""Errors meant for the user, printed as one line without a traceback: by job.finalise for a job
(its record holds the line too), by train.py for what Hydra refused before a job existed."""


class ConfigError(ValueError):
    """Bad input found before any rank starts: the message names the problem and the fix. Exit code
    2."""

    exit_code = 2


class ConfigWarning(UserWarning):
    """A config that runs but measures something the user may not mean (ranks that outnumber the
    cores, DDP's timing waits in the window): said once, before any rank starts, as one line
    `warning: ...` (base/log.py)."""
