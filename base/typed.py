"""JSON objects as dataclasses: the mechanism behind the run record's types (base/record_types.py).

A `Block` is a dataclass that reads itself from a JSON object (`from_dict`, checking each field's
type against its annotation and naming the path of a wrong one) and writes itself back (`to_dict`).
A block read from disk writes back exactly the keys it was read with, in their order: a record that
is read and written again is the same JSON, so the committed records, W&B and the tables never see a
key appear or vanish. A block built in code writes every field. Keys the type does not declare are
kept in `extra` and written back, so a record written by a newer version of the tool still reads
(tests/test_record_types.py checks that the committed records have none)."""

from __future__ import annotations

import dataclasses
import types
import typing
from functools import lru_cache
from typing import Any, ClassVar, TypeVar, Union

B = TypeVar("B", bound="Block")


UNCHECKED = "unchecked"  # where a lenient read keeps the values that did not match their fields


class RecordError(ValueError):
    """A record that cannot be read: the message is one line naming the file or field and what was
    wrong."""


class Block:
    """Base of every record dataclass (subclasses are @dataclass)."""

    _keys: ClassVar[tuple[str, ...] | None] = (
        None  # per instance once read: the keys the JSON object had
    )

    @property
    def extra(self) -> dict[str, Any]:
        """Keys of the JSON object this type does not declare (empty for a block built in code)."""
        return self.__dict__.get("_extra", {})

    def has(self, name: str) -> bool:
        """Whether the JSON object had this key (a block built in code has every field)."""
        return self._keys is None or name in self._keys

    @classmethod
    def from_dict(cls: type[B], d: Any, where: str | None = None, lenient: bool = False) -> B:
        """lenient: a key whose value does not match its field is kept under `unchecked` (an
        undeclared key, so the record written from it reads back) and its field left at its default,
        instead of refusing the object."""
        where = where or cls.__name__
        if not isinstance(d, dict):
            raise RecordError(f"{where}: expected an object ({cls.__name__}), got {_show(d)}")
        hints = _hints(cls)
        kwargs, extra, unchecked = {}, {}, {}
        for key, value in d.items():
            if key not in hints:
                extra[key] = value
                continue
            try:
                kwargs[key] = convert(hints[key], value, f"{where}.{key}")
            except RecordError:
                if not lenient:
                    raise
                unchecked[key] = value
        if unchecked:
            extra[UNCHECKED] = {**extra.get(UNCHECKED, {}), **unchecked}
            d = {k: v for k, v in d.items() if k not in unchecked} | {UNCHECKED: extra[UNCHECKED]}
        missing = [
            f.name
            for f in dataclasses.fields(cls)
            if f.name not in kwargs
            and f.default is dataclasses.MISSING
            and f.default_factory is dataclasses.MISSING
        ]
        if missing:
            raise RecordError(f"{where}: missing {', '.join(missing)} ({cls.__name__})")
        obj = cls(**kwargs)
        obj.__dict__["_keys"] = tuple(d)
        if extra:
            obj.__dict__["_extra"] = extra
        return obj

    def to_dict(self) -> dict[str, Any]:
        fields = {f.name: f for f in dataclasses.fields(self)}
        extra = self.extra
        keys = self._keys
        if keys is None:
            keys = tuple(fields)
        else:  # what was read, plus any field set since to something other than its default
            keys = keys + tuple(
                n for n, f in fields.items() if n not in keys and getattr(self, n) != _default(f)
            )
        out = {}
        for k in keys:
            if k in extra:
                out[k] = extra[k]
            elif k in fields:
                out[k] = dump(getattr(self, k))
        for k, v in extra.items():
            out.setdefault(k, v)
        return out


def dump(value: Any) -> Any:
    if isinstance(value, Block):
        return value.to_dict()
    if isinstance(value, list):
        return [dump(v) for v in value]
    if isinstance(value, dict):
        return {k: dump(v) for k, v in value.items()}
    return value


def _default(f: dataclasses.Field) -> Any:
    if f.default is not dataclasses.MISSING:
        return f.default
    if f.default_factory is not dataclasses.MISSING:
        return f.default_factory()
    return dataclasses.MISSING


@lru_cache(maxsize=None)
def _hints(cls: type) -> dict[str, Any]:
    names = {f.name for f in dataclasses.fields(cls)}
    return {k: v for k, v in typing.get_type_hints(cls).items() if k in names}


_SCALARS = {int: "an integer", float: "a number", str: "a string", bool: "true or false"}


def convert(tp: Any, value: Any, where: str) -> Any:
    """value, checked against the annotation tp (and built into blocks); RecordError naming `where`
    if it is not."""
    if tp is Any:
        return value
    origin = typing.get_origin(tp)
    if origin in (Union, types.UnionType):
        args = typing.get_args(tp)
        if value is None:
            if type(None) in args:
                return None
        errors = []
        for arg in args:
            if arg is type(None):
                continue
            try:
                return convert(arg, value, where)
            except RecordError as e:
                errors.append(e)
        if len(errors) == 1:
            raise errors[0]
        raise RecordError(f"{where}: expected {_name(tp)}, got {_show(value)}")
    if origin is list:
        if not isinstance(value, list):
            raise RecordError(f"{where}: expected a list, got {_show(value)}")
        (arg,) = typing.get_args(tp) or (Any,)
        if arg is Any or (arg in _SCALARS and all(_is(arg, v) for v in value)):
            return value
        return [convert(arg, v, f"{where}[{i}]") for i, v in enumerate(value)]
    if origin is dict:
        if not isinstance(value, dict):
            raise RecordError(f"{where}: expected an object, got {_show(value)}")
        _, arg = typing.get_args(tp) or (str, Any)
        if arg is Any:
            return value
        return {k: convert(arg, v, f"{where}.{k}") for k, v in value.items()}
    if isinstance(tp, type) and issubclass(tp, Block):
        return tp.from_dict(value, where)
    if tp in _SCALARS:
        if _is(tp, value):
            # as read: an int stays an int where a float is declared, so the JSON is unchanged
            return value
        raise RecordError(f"{where}: expected {_SCALARS[tp]}, got {_show(value)}")
    raise TypeError(f"{where}: unsupported annotation {tp!r}")


def _is(tp: type, value: Any) -> bool:
    if tp is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if tp is int:
        return isinstance(value, int) and not isinstance(value, bool)
    return isinstance(value, tp)


def _name(tp: Any) -> str:
    return " or ".join(
        _SCALARS.get(a, getattr(a, "__name__", str(a)))
        for a in typing.get_args(tp)
        if a is not type(None)
    )


def _show(value: Any) -> str:
    text = repr(value)
    return f"{type(value).__name__} {text[:40] + '...' if len(text) > 40 else text}"


def schema_lines(
    cls: type, indent: str = "", seen: set | None = None, skip: tuple = ()
) -> list[str]:
    """The fields of a block and of the blocks inside it, one line each (docs/record.md is made from
    these). A block met again is named, not spelled out again (`seen`); `skip`: field names left out
    (the ones a base type lists)."""
    seen = set() if seen is None else seen
    lines = []
    for f in dataclasses.fields(cls):
        if f.name in skip:
            continue
        tp = _hints(cls)[f.name]
        inner = _blocks_in(tp)
        doc = f.metadata.get("doc", "") or (_first_line(inner[0]) if inner else "")
        again = [b.__name__ for b in inner if b in seen]
        lines.append(
            f"{indent}- `{f.name}`: {_type_text(tp)}"
            + (f": {doc}" if doc else "")
            + (f" (fields as above: {', '.join(again)})" if again else "")
        )
        for block in inner:
            if block not in seen:
                seen.add(block)
                lines.extend(schema_lines(block, indent + "  ", seen))
    return lines


def _first_line(block: type) -> str:
    """A block's docstring up to its first sentence's end ("" for a block without its own
    docstring)."""
    doc = block.__doc__
    if not doc or doc.startswith(f"{block.__name__}("):  # dataclass's stand-in: the signature
        return ""
    text = " ".join(doc.split())
    return text.split(". ")[0].rstrip(".")


def _blocks_in(tp: Any) -> list[type]:
    if isinstance(tp, type) and issubclass(tp, Block):
        return [tp]
    return [b for arg in typing.get_args(tp) for b in _blocks_in(arg)]


def _type_text(tp: Any) -> str:
    if tp is Any:
        return "any"
    origin = typing.get_origin(tp)
    if origin in (Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        text = " | ".join(_type_text(a) for a in args)
        return text + " | null" if len(args) < len(typing.get_args(tp)) else text
    if origin is list:
        return f"list[{_type_text(typing.get_args(tp)[0])}]" if typing.get_args(tp) else "list"
    if origin is dict:
        return (
            f"object[str, {_type_text(typing.get_args(tp)[1])}]"
            if typing.get_args(tp)
            else "object"
        )
    return getattr(tp, "__name__", str(tp))
