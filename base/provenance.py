"""What the user typed, kept apart from what it resolved to, wherever the tool writes text.

A value passed through `${oc.env:NAME}` may be a secret (a token, a password, a private path): the
ranks need the value, but the record, the job log, the printed `next:` commands and W&B get the text
the user typed. So:
  - the recorded command and overrides are Hydra's task overrides unresolved (`typed_overrides`),
    shell-quoted;
  - the record's `config` is the resolved config except for the keys whose value came from the
    environment
    (directly, or through an interpolation of such a key), which keep their `${oc.env:...}` text
    (`as_typed`), and so do the communication variables the ranks exported from such keys
    (`as_typed_vars`).
Replaying the command with the same environment gives the same run."""

from __future__ import annotations

import copy
import re
import shlex
from typing import Any

from omegaconf import DictConfig, ListConfig, OmegaConf

ENV_RESOLVER = re.compile(r"\$\{\s*oc\.env\s*:")
NODE_REFERENCE = re.compile(
    r"\$\{\s*([A-Za-z_][\w.]*)\s*\}"
)  # ${key} or ${group.key}, not a resolver call


def typed_overrides(node: Any) -> list[str]:
    """Hydra's override list (hydra.overrides.task) as the user typed it: reading its items would
    resolve them."""
    if isinstance(node, (DictConfig, ListConfig)):
        return [str(o) for o in OmegaConf.to_container(node, resolve=False)]
    return [str(o) for o in node or []]


def command(overrides: list[str], script: str = "train.py", multirun: bool = False) -> str:
    """`python train.py <overrides>`, each word shell-quoted: pasted into a shell it runs that,
    nothing else."""
    return shlex.join(["python", script, *(["-m"] if multirun else []), *overrides])


def from_environment(cfg: DictConfig) -> dict[str, str]:
    """{dotted key: typed text} of every leaf whose value comes from the environment:
    `${oc.env:...}` in its text, or a reference to a key that does (followed through any number of
    references)."""
    typed = OmegaConf.to_container(cfg, resolve=False)
    leaves: dict[str, str] = {}

    def walk(node: Any, path: str) -> None:
        if isinstance(node, dict):
            for key, value in node.items():
                walk(value, f"{path}.{key}" if path else str(key))
        elif isinstance(node, list):
            for i, value in enumerate(node):
                walk(value, f"{path}.{i}")
        elif isinstance(node, str) and "${" in node:
            leaves[path] = node

    walk(typed, "")
    found: dict[str, bool] = {}

    def tainted(path: str, seen: frozenset = frozenset()) -> bool:
        if path in found:
            return found[path]
        text = leaves.get(path)
        if text is None or path in seen:
            return False
        result = bool(ENV_RESOLVER.search(text)) or any(
            tainted(ref, seen | {path})
            or any(tainted(p, seen | {path}) for p in leaves if p.startswith(ref + "."))
            for ref in NODE_REFERENCE.findall(text)
        )
        found[path] = result
        return result

    return {path: text for path, text in leaves.items() if tainted(path)}


def as_typed(plain: dict | None, typed: dict[str, str]) -> dict | None:
    """A copy of the resolved config `plain` with each key of `typed` ({dotted key: text}) set back
    to its text."""
    if plain is None or not typed:
        return plain
    shown = copy.deepcopy(plain)
    for path, text in typed.items():
        *parents, leaf = path.split(".")
        node: Any = shown
        for part in parents:
            node = (
                node[int(part)]
                if isinstance(node, list)
                else node.get(part)
                if isinstance(node, dict)
                else None
            )
            if node is None:
                break
        else:
            if isinstance(node, list) and leaf.isdigit() and int(leaf) < len(node):
                node[int(leaf)] = text
            elif isinstance(node, dict) and leaf in node:
                node[leaf] = text
    return shown


COMM_PREFIXES = {
    "nccl": "NCCL_",
    "gloo": "GLOO_",
}  # comm/env.py exports nccl.X as NCCL_X, gloo.X as GLOO_X


def as_typed_vars(variables: dict | None, typed: dict[str, str]) -> dict | None:
    """The record's communication variables (env.vars) with those set from a typed key (nccl.X,
    gloo.X) shown as the text typed: the ranks exported the value."""
    if not variables or not typed:
        return variables
    shown = dict(variables)
    for path, text in typed.items():
        section, _, key = path.partition(".")
        name = COMM_PREFIXES.get(section, "\0") + key
        if name in shown:
            shown[name] = text
    return shown


def env_name(text: Any) -> str | None:
    """NAME when text is exactly `${oc.env:NAME}` or `${oc.env:NAME,default}`, else None."""
    m = re.fullmatch(r"\$\{\s*oc\.env\s*:\s*([A-Za-z_]\w*)\s*(?:,[^}]*)?\}", str(text))
    return m.group(1) if m else None
