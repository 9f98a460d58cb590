"""The knobs' reference, written from base/schema.py's fields, so a knob is described once.

docs/config.md's knob table and `python train.py --help`'s knob list (`${knob_help:}` in
conf/hydra/help/app.yaml, a resolver job.config registers) are both made here from each field's
type, default, bounds and doc; a test checks that the committed page is current:

    python -m base.config_doc --write docs/config.md
"""

from __future__ import annotations

import dataclasses
import enum
import re
import typing
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf

from base.schema import CONF_DIR, Config

BEGIN = (
    "<!-- knobs: generated from base/schema.py by `python -m base.config_doc --write "
    "docs/config.md`; "
    "do not edit by hand -->"
)
END = "<!-- end of the generated knobs -->"
INTERPOLATION = re.compile(r"^\$\{(\w+)\.(\w+)\}$")
GPU_OR = re.compile(r"^\$\{gpu_or:(.*),([^,]*)\}$")
HELP_WIDTH = 100


def _fields(cls: type) -> list[dataclasses.Field]:
    return list(dataclasses.fields(cls))


def _default(f: dataclasses.Field) -> Any:
    if f.default_factory is not dataclasses.MISSING:
        return f.default_factory()
    return f.default


def _is_section(f: dataclasses.Field) -> bool:
    return "doc" in f.metadata and dataclasses.is_dataclass(f.default_factory)


def knobs(cls: type = Config, prefix: str = "") -> list[tuple[str, dataclasses.Field, Any]]:
    """(dotted key, field, hint) of every knob, depth first in the schema's order."""
    hints = typing.get_type_hints(cls)
    out = []
    for f in _fields(cls):
        if "doc" not in f.metadata:
            continue
        out.append((prefix + f.name, f, hints[f.name]))
        if _is_section(f):
            out += knobs(f.default_factory, f"{prefix}{f.name}.")
    return out


def kind(hint: Any, f: dataclasses.Field | None, sep: str = " | ") -> str:
    """A knob's type as a user types it: its choices, or a number and its bounds (f's)."""
    args = [a for a in typing.get_args(hint) if a is not type(None)]
    optional = type(None) in typing.get_args(hint)
    origin = typing.get_origin(hint)
    if origin is typing.Union:
        inner = (
            "number"
            if set(args) == {int, float}
            else " or ".join(kind(a, None, sep) for a in args)
            if len(args) > 1
            else kind(args[0], None, sep)
        )
    elif origin in (list, typing.List):
        inner = f"list of {kind(args[0], None, sep)}" if args else "list"
    elif origin in (dict, typing.Dict):
        inner = "map"
    elif isinstance(hint, type) and issubclass(hint, enum.Enum):
        names = list(dict.fromkeys(m.value for m in hint))  # aliases (fp32 for float32) once
        inner = sep.join(names)
    elif dataclasses.is_dataclass(hint):
        inner = f"section ({', '.join(f.name for f in dataclasses.fields(hint))})"
    else:
        inner = {int: "int", float: "float", bool: "bool", str: "str"}.get(hint, "any")
    meta = f.metadata if f is not None else {}
    bounds = [f"{word} {meta[b]}" for b, word in (("ge", ">="), ("gt", ">")) if b in meta]
    also = meta.get("also")  # a number, or one of these words (repeats=auto)
    if also:
        inner = next((k for k in ("int", "float") if k in inner.split(" or ")), inner)
    text = inner + (f" {', '.join(bounds)}" if bounds and origin not in (list, dict) else "")
    return text + "".join(f" or {w}" for w in also or ()) + (" or null" if optional else "")


def _scalar(v: Any) -> str:
    if v is None:
        return "null"
    if isinstance(v, bool):
        return str(v).lower()
    if isinstance(v, enum.Enum):
        return str(v.value)
    if isinstance(v, list):
        return "[" + ", ".join(_scalar(x) for x in v) + "]"
    if isinstance(v, dict):
        return "{" + ", ".join(f"{k}: {_scalar(x)}" for k, x in v.items()) + "}"
    return str(v)


def _per_option(group: str, key: str) -> str:
    """Each option's value of `key` in conf/<group>/ (GPU / CPU where it depends on the GPUs)."""
    shown = []
    for path in sorted((CONF_DIR / group).glob("*.yaml")):
        raw = OmegaConf.to_container(OmegaConf.load(path), resolve=False).get(key)
        m = GPU_OR.match(str(raw))
        value = f"{m[1]} GPU / {m[2]} CPU" if m else _scalar(raw)
        shown.append(f"{path.stem} {value}".replace("${gpu_count:}", "every GPU"))
    return ", ".join(shown)


def default(f: dataclasses.Field, per_option: bool = True) -> str:
    """A knob's default in words: its value, or for `${group.key}` each option's."""
    value = _default(f)
    m = INTERPOLATION.match(str(value)) if isinstance(value, str) else None
    if m is None:
        return _scalar(value)
    group, key = m[1], m[2]
    if not per_option or group != "scale":
        return f"the {group}'s {key}"
    return f"the scale's {key}: {_per_option(group, key)}"


def _group_default(group: str) -> str:
    for entry in OmegaConf.load(CONF_DIR / "config.yaml").defaults:
        if isinstance(entry, dict) or OmegaConf.is_dict(entry):
            if group in entry:
                return str(entry[group])
    return ""


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def table() -> str:
    """docs/config.md's table: every knob (`section.key` in a section), every group's options."""
    rows = ["| key | default | type | what it does |", "|---|---|---|---|"]
    for key, f, hint in knobs():
        if f.metadata.get("group"):
            options = " ".join(sorted(p.stem for p in (CONF_DIR / key).glob("*.yaml")))
            doc = _cell(f.metadata["doc"])
            rows.append(f"| `{key}=` | `{_group_default(key)}` | group: {options} | {doc} |")
        elif _is_section(f):
            rows.append(f"| **`{key}.*`** | | | {_cell(f.metadata['doc'])} |")
        else:
            cells = (default(f), kind(hint, f), f.metadata["doc"])
            rows.append(f"| `{key}` | " + " | ".join(_cell(c) for c in cells) + " |")
    return "\n".join(rows) + "\n"


def page_block() -> str:
    return f"{BEGIN}\n\n{table()}\n{END}"


def _fit(text: str, room: int) -> str:
    """The doc cut at its last clause (`;`) that fits, for one line of --help."""
    while len(text) > room and "; " in text:
        text = text.rsplit("; ", 1)[0]
    return text if len(text) <= room else text[: room - 3].rsplit(" ", 1)[0] + "..."


def help_lines() -> str:
    """`--help`'s knob list: the knobs marked main, one line each (key=default or its choices, the
    doc's first clauses), then the sections' names. No `$`: Hydra fills the help template with
    string.Template, which would read it as a placeholder."""
    lines, sections = [], []
    width = 32
    for key, f, hint in knobs():
        if _is_section(f):
            sections.append(f"{key}.*")
            continue
        if not f.metadata.get("main"):
            continue
        value = _default(f)
        if isinstance(hint, type) and issubclass(hint, enum.Enum):
            names = [m.value for m in hint]
            typed = "|".join([value.value] + [n for n in names if n != value.value])
        elif INTERPOLATION.match(str(value)):  # the doc's table has each option's value
            typed = kind(hint, None)
        else:
            typed = default(f)
        head = f"  {key}={typed}"
        head = head.ljust(width) if len(head) < width - 1 else head + "  "
        lines.append(head + _fit(f.metadata["doc"], HELP_WIDTH - len(head)))
    more = "  every key, its default and bounds: docs/config.md; also " + " ".join(sections)
    lines.append(_wrap(more, "    "))
    return "\n".join(lines).replace("$", "")


def _wrap(text: str, indent: str) -> str:
    import textwrap

    return "\n".join(textwrap.wrap(text, HELP_WIDTH, subsequent_indent=indent))


def _write(path: Path) -> None:
    text = path.read_text()
    head, found, rest = text.partition(BEGIN)
    if not found:
        raise SystemExit(f"{path} has no {BEGIN!r} line to write after")
    _, _, tail = rest.partition(END)
    path.write_text(head + page_block() + tail)


if __name__ == "__main__":
    import sys

    if sys.argv[1:2] == ["--write"] and len(sys.argv) == 3:
        _write(Path(sys.argv[2]))
    elif sys.argv[1:] == ["--help-lines"]:
        print(help_lines())
    else:
        print(page_block())
