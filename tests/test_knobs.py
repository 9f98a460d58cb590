"""Each knob is described once, in base/schema.py: its type, default, bounds and doc.
conf/config.yaml holds none; the config page's table and --help's knob list are written from it
(issue 35, item 6)."""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

from omegaconf import MISSING, OmegaConf

import base.schema as schema
from base import config_doc
from tests.conftest import compose

ROOT = Path(__file__).resolve().parent.parent


def test_docs_config_md_is_generated_from_the_schema():
    assert config_doc.page_block() in (ROOT / "docs" / "config.md").read_text(), (
        "docs/config.md is stale: python -m base.config_doc --write docs/config.md"
    )


def test_every_knob_has_its_default_and_doc_in_the_schema():
    """A knob without a default or a doc (a bare MISSING, a value left in the YAML) is named."""
    for key, f, _ in config_doc.knobs():
        if f.metadata.get("group") or config_doc._is_section(f):
            continue
        assert f.metadata["doc"].strip(), key
        assert config_doc._default(f) is not MISSING, f"{key}: no default in base/schema.py"
    undocumented = [
        f"{cls.__name__}.{f.name}"
        for cls in (
            schema.Config,
            *(f.default_factory for _, f, _ in config_doc.knobs() if config_doc._is_section(f)),
        )
        for f in dataclasses.fields(cls)
        if "doc" not in f.metadata
    ]
    assert undocumented == [], f"knobs without knob(default, doc): {undocumented}"


def test_conf_config_yaml_holds_no_knob():
    """The primary config file is the defaults list and Hydra's settings; a knob's value there would
    be a second place for its default."""
    raw = OmegaConf.load(ROOT / "conf" / "config.yaml")
    assert set(raw.keys()) == {"defaults", "hydra"}, set(raw.keys()) - {"defaults", "hydra"}


def test_the_defaults_keep_their_own_bounds():
    for key, f, _ in config_doc.knobs():
        value = config_doc._default(f)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            assert value >= f.metadata.get("ge", value), key
            assert value > f.metadata.get("gt", value - 1), key


def test_composed_defaults_are_the_schemas():
    cfg = compose(["logger=none"])
    for key, f, _ in config_doc.knobs():
        if f.metadata.get("group") or config_doc._is_section(f):
            continue
        value = config_doc._default(f)
        node = OmegaConf.select(cfg, key) if not isinstance(value, str) else None
        if isinstance(value, (bool, int, float)) or value is None:
            assert node == value, key


def test_help_lists_the_main_knobs_from_the_schema(monkeypatch, capsys):
    import train

    monkeypatch.setattr(sys, "argv", ["train.py", "--help"])
    assert train.main() == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    main = [key for key, f, _ in config_doc.knobs() if f.metadata.get("main")]
    assert main and all(any(line.startswith(f"  {key}=") for line in lines) for key in main)
    assert max(len(line) for line in config_doc.help_lines().splitlines()) <= config_doc.HELP_WIDTH
    assert "docs/config.md" in out and "measure.*" in out
