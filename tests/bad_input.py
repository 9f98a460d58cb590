"""Bad input checked in-process, the way train.py meets it: compose conf/ with Hydra's compose API
(Hydra's own refusals become one line through job.config.hydra_error), then job.config.prepare with
an injected Host, so a test can pose as a 1-GPU box or a GPU-less Slurm login node whatever this
machine is (the config's ${gpu_count:} and ${gpu_or:...} resolve for the injected host too)."""

from __future__ import annotations

from unittest import mock

import pytest

from device.host import Host
from job.config import check_added_keys, check_command_line, hydra_error, prepare
from base.errors import ConfigError
from tests.conftest import compose

GIB = 2**30
CPU_BOX = Host(gpus=0, cpus=2, free_bytes=20 * GIB, gpu_free_bytes=None)  # this project's machine
LOGIN_NODE = Host(
    gpus=0, cpus=4, free_bytes=2 * GIB, gpu_free_bytes=None
)  # facts that must not count


def composed(overrides: list[str]):
    """The config train.py would get, or the ConfigError it would print for what Hydra refused."""
    overrides = [
        *overrides,
        *(["logger=none"] if not any(o.startswith("logger=") for o in overrides) else []),
    ]
    check_added_keys(overrides)  # what train.py checks before Hydra runs, in its order
    check_command_line(overrides)
    try:
        return compose(overrides)
    except Exception as e:
        error = hydra_error(e, overrides)
        if error is None:
            raise
        raise error from None


def accepted(overrides: list[str], host: Host = CPU_BOX, submitting: bool = False) -> dict:
    """The plain config the ranks would get on `host`."""
    with mock.patch("device.host.gpu_count", lambda: host.gpus):
        return prepare(composed(overrides), submitting=submitting, host=host)


def refused(overrides: list[str], host: Host = CPU_BOX, submitting: bool = False) -> str:
    """The one line a bad input gets, before any rank starts."""
    with pytest.raises(ConfigError) as e:
        accepted(overrides, host, submitting)
    message = str(e.value)
    assert "\n" not in message, message
    return message
