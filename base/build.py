"""Hydra's `instantiate` for what users swap (the model, the data set, the DDP comm hook, the
logger): each of those config nodes names its `_target_` beside keys that describe it (arch, name,
kind, workers, ...), and the target gets the node's keys and the run's own arguments (image_size, a
rank's seed, ...) that its signature takes."""

from __future__ import annotations

import inspect
from typing import Any

from omegaconf import DictConfig, OmegaConf

from base.errors import ConfigError


def target_of(node: Any) -> Any:
    """The callable a node's `_target_` names (None when it names none); ConfigError naming the key
    when it cannot be imported."""
    from hydra.utils import get_object

    path = (
        OmegaConf.to_container(node, resolve=True)
        if isinstance(node, DictConfig)
        else dict(node or {})
    ).get("_target_")
    if not path:
        return None
    try:
        return get_object(str(path))
    except Exception as e:  # noqa: BLE001 - Hydra raises ImportError or its own error with the cause in the text
        raise ConfigError(
            f"_target_={path} cannot be imported ({str(e).splitlines()[0]}). Name a class or "
            "function "
            f"importable from here (the repository root is on sys.path), e.g. my_pkg.make_model."
        ) from None


DESCRIPTIVE = (
    "arch",
    "name",
    "kind",
    "input_shape",
    "workers",
    "pin_memory",
    "mode",
)  # what the tool reads


def build(node: Any, /, **runtime: Any) -> Any:
    """`node`'s target called with the node's keys and the `runtime` arguments its signature names;
    keys it does not take are descriptions for the record, not arguments. A target that takes only
    **kwargs (torchvision's model functions) gets the node's keys without the descriptive ones
    (DESCRIPTIVE) and no runtime arguments."""
    from hydra.utils import instantiate

    target = target_of(node)
    if target is None:
        return None
    plain = (
        OmegaConf.to_container(node, resolve=True) if isinstance(node, DictConfig) else dict(node)
    )
    try:
        params = inspect.signature(target).parameters
    except (TypeError, ValueError):  # a builtin without a signature: everything
        params = None
    named = (
        {}
        if params is None
        else {k for k, p in params.items() if p.kind is not inspect.Parameter.VAR_KEYWORD}
    )
    own = {k: v for k, v in plain.items() if k != "_target_"}
    if params is None or len(named) < len(
        params
    ):  # **kwargs: the node's own keys, less the descriptive ones
        own = {k: v for k, v in own.items() if k not in DESCRIPTIVE or k in named}
        runtime = {k: v for k, v in runtime.items() if k in named}
    else:
        own = {k: v for k, v in own.items() if k in params and k not in runtime}
        runtime = {k: v for k, v in runtime.items() if k in params}
    # the node's keys through Hydra; the runtime arguments (the run record handed to the logger) as
    # the Python objects they are: through instantiate a record's `${oc.env:...}` text would be
    # resolved, and its config's own
    # `_target_` nodes (record.config.model) built
    partial = instantiate({"_target_": plain["_target_"], **own}, _convert_="all", _partial_=True)
    return partial(**runtime)
