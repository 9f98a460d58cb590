"""A record of an earlier schema, brought up to this one once, so that readers read one version and
need no fallbacks:

    python -m base.upgrade <run or sweep dirs ...>

Record.read refuses an older record with this command as the fix. What each version changed (and
what is filled in):
  3  a finding's `seed` (the source document it matches) is `matches`, its text "source 00N"; the
  model, data, comm
     hook (optim) and logger nodes of the config name the `_target_` that builds them, taken from
     conf/'s option of the same arch, kind or name (records written before conf/ named them)
  2  who writes the record (the process that outlives the ranks) and the status "interrupted":
  nothing to fill in
Values are never recomputed: a record keeps every number it was written with.
"""

from __future__ import annotations

import json
import re
import sys
from functools import lru_cache
from pathlib import Path
from typing import Any

CONF = Path(__file__).resolve().parent.parent / "conf"
NODES = {
    "model": "arch",
    "data": "kind",
    "optim": "name",
    "logger": "name",
}  # group -> the key naming its option


@lru_cache(maxsize=None)
def _targets(group: str) -> dict[str, Any]:
    """conf/<group>/*.yaml: the option key's value -> its _target_ (first option wins, as a plain
    read of YAML)."""
    from omegaconf import OmegaConf

    out: dict[str, Any] = {}
    for path in sorted((CONF / group).glob("*.yaml")):
        node = OmegaConf.to_container(OmegaConf.load(path), resolve=False)
        if isinstance(node, dict) and "_target_" in node and NODES[group] in node:
            out.setdefault(node[NODES[group]], node["_target_"])
    return out


def _to_3(d: dict) -> None:
    config = d.get("config")
    for group, key in NODES.items():
        node = config.get(group) if isinstance(config, dict) else None
        if isinstance(node, dict) and "_target_" not in node:
            known = _targets(group)
            if node.get(key) not in known:
                raise ValueError(
                    f"config.{group}.{key}={node.get(key)!r} names no option in conf/{group}/"
                )
            config[group] = {"_target_": known[node.get(key)], **node}
    result = d.get("result")
    diagnosis = result.get("diagnosis") if isinstance(result, dict) else None
    for f in (diagnosis.get("findings") if isinstance(diagnosis, dict) else None) or []:
        if isinstance(f, dict) and "seed" in f and "matches" not in f:
            text = re.sub(
                r"\bseeds? (00[0-4])",
                lambda m: m.group(0).replace("seed", "source"),
                str(f["seed"]),
            )
            text = text.replace("no seed:", "no source:", 1).replace("the seed's", "the source's")
            items = [("matches", text) if k == "seed" else (k, v) for k, v in f.items()]
            f.clear()
            f.update(items)


STEPS = {1: None, 2: _to_3}  # version -> what brings it to the next (None: nothing to fill in)


def upgrade(d: dict) -> dict:
    """The record's JSON object at the current schema version (in place, and returned); ValueError
    when it cannot be."""
    from base.record import SCHEMA_VERSION

    version = d.get("schema_version")
    if version not in STEPS and version != SCHEMA_VERSION:
        raise ValueError(f"schema_version {version!r} is none this tool knows")
    while version != SCHEMA_VERSION:
        step = STEPS[version]
        if step is not None:
            step(d)
        version += 1
    d["schema_version"] = version
    return d


def upgrade_dirs(roots: list[str]) -> tuple[int, int, list[str]]:
    """(upgraded, already current, errors): every record under roots, rewritten atomically where it
    was older."""
    from base.record import SCHEMA_VERSION, Record, RecordError, find_records

    done = current = 0
    errors = []
    for path in find_records(*roots):
        try:
            d = json.loads(path.read_text())
            if d.get("schema_version") == SCHEMA_VERSION:
                current += 1
                continue
            Record.from_dict(upgrade(d)).write(path.parent)
            done += 1
        except (OSError, ValueError, RecordError) as e:  # JSONDecodeError is a ValueError
            errors.append(f"{path}: {e}")
    return done, current, errors


def main(argv: list[str]) -> int:
    if not argv or argv[0].startswith("-"):
        print(__doc__.split("\n\n")[1].strip(), file=sys.stderr)
        return 2
    done, current, errors = upgrade_dirs(argv)
    print(
        f"{done} record(s) upgraded, {current} already current"
        + (f", {len(errors)} not:" if errors else "")
    )
    for e in errors:
        print(f"  {e}")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
