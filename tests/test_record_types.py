"""The typed run record: every committed record reads into the types and writes back the same JSON;
absent blocks read as None; a wrong-typed field is one line naming it."""

import copy
import dataclasses
import json
from pathlib import Path

import pytest

from base.record import Record, RecordError, find_records
from base.record_types import (
    CollectivesResult,
    Env,
    GradSyncResult,
    PairGroupsResult,
    ScriptResult,
    TrainResult,
)
from base.typed import Block

ROOT = Path(__file__).resolve().parent.parent
COMMITTED = find_records(ROOT / "results")


def _extras(block, path="record"):
    if isinstance(block, Block):
        yield from (f"{path}.{k}" for k in block.extra)
        for f in dataclasses.fields(block):
            yield from _extras(getattr(block, f.name), f"{path}.{f.name}")
    elif isinstance(block, list):
        for i, x in enumerate(block):
            if isinstance(x, (Block, list)):  # not into each number of a per-step series
                yield from _extras(x, f"{path}[{i}]")


def test_every_committed_record_reads_typed_and_round_trips():
    assert len(COMMITTED) > 100
    types = {
        "train": TrainResult,
        "collectives": CollectivesResult,
        "grad_sync": GradSyncResult,
        "pair_groups": PairGroupsResult,
        "script": ScriptResult,
    }
    for path in COMMITTED:
        text = path.read_text()
        record = Record.read(path)
        # a hung or killed run can end before any rank wrote its result: the record keeps the error
        # (and dumps)
        ended_early = record.result is None and record.status in ("hung", "failed")
        assert isinstance(record.result, types[record.task]) or ended_early, path
        # the same text, key order and int/float kept (== on the dicts would take 1 for 1.0 and
        # ignore order); without indent=, which json only encodes in Python (half this test's time)
        assert json.dumps(record.to_dict()) == json.dumps(json.loads(text)), path
        assert list(_extras(record)) == [], (
            f"{path}: keys the types do not declare: {list(_extras(record))}"
        )


def test_every_committed_record_names_the_target_of_each_node_a_user_swaps():
    """As this version writes them (conf/<group>/*.yaml's _target_), so readers that rebuild a
    record's model (the what-if model) or its logger need no table of what older nodes meant."""
    for path in COMMITTED:
        config = json.loads(path.read_text())["config"]
        for group in ("model", "data", "optim", "logger"):
            assert "_target_" in config[group], f"{path}: config.{group} has no _target_"


def _a_train_record() -> dict:
    path = next(p for p in COMMITTED if json.loads(p.read_text())["task"] == "train")
    return json.loads(path.read_text())


def test_a_missing_optional_block_reads_as_none(tmp_path):
    d = _a_train_record()
    del d["result"]["straggler"]
    d["result"]["comm"] = None
    del d["env"]["link"]
    (tmp_path / "run_record.json").write_text(json.dumps(d))
    record = Record.read(tmp_path)
    assert (
        record.result.straggler is None and record.result.comm is None and record.env.link is None
    )
    assert record.to_dict() == d  # absent stays absent, null stays null


def test_a_wrong_typed_field_is_one_line_naming_it(tmp_path):
    d = _a_train_record()
    d["result"]["throughput"]["steps_per_s"] = "fast"
    (tmp_path / "run_record.json").write_text(json.dumps(d))
    with pytest.raises(RecordError) as e:
        Record.read(tmp_path)
    msg = str(e.value)
    assert "\n" not in msg
    assert "result.throughput.steps_per_s: expected a number, got str 'fast'" in msg
    assert str(tmp_path / "run_record.json") in msg


def test_an_unknown_key_is_kept_and_written_back():
    d = _a_train_record()
    d["result"]["comm"] = dict(d["result"]["comm"] or {}, new_figure=1.5)
    record = Record.from_dict(copy.deepcopy(d))
    assert record.result.comm.extra == {"new_figure": 1.5}
    assert record.to_dict() == d


def test_a_record_built_in_code_writes_every_field_and_reads_back(tmp_path):
    record = Record.failed(
        {"task": "train"}, {"name": "j", "overrides": ["steps=3"]}, "rank 1: boom"
    )
    assert isinstance(record.env, Env) and record.env.to_dict() == {}
    path = record.write(tmp_path)
    again = Record.read(path)
    assert again.to_dict() == record.to_dict()
    assert again.job.name == "j" and again.result is None and again.error == "rank 1: boom"
    assert list(record.to_dict())[0] == "schema_version"


def test_a_writer_slip_keeps_the_record_with_a_warning(tmp_path):
    """The slipped value is kept under result.unchecked, every other field stays typed, and the
    record reads back."""
    with pytest.warns(UserWarning, match="result.steps: expected an integer"):
        record = Record.ok(
            {"task": "train"},
            {},
            env={},
            started="t",
            result={"steps": "many", "world_size": 2, "headline": {}},
        )
    assert record.result.world_size == 2 and record.result.steps is None
    assert record.to_dict()["result"] == {
        "world_size": 2,
        "headline": {},
        "unchecked": {"steps": "many"},
    }
    (tmp_path / "run_record.json").write_text(json.dumps(record.to_dict()))
    back = Record.read(tmp_path)
    assert back.result.world_size == 2 and back.result.extra == {"unchecked": {"steps": "many"}}


def test_docs_record_md_is_generated_from_the_types():
    from base.record import schema_doc

    assert schema_doc() in (ROOT / "docs" / "record.md").read_text(), (
        "docs/record.md is stale: python -m base.record --write docs/record.md"
    )


def test_a_diagnosis_reads_its_findings_typed():
    """The findings a record stores are the diagnosis's own type (one type, no dict readers); a
    broken one is named."""
    from base.record_types import DiagnosisBlock, Finding, Saving

    with_diag = [
        r
        for r in map(Record.read, COMMITTED)
        if r.result is not None and r.result.diagnosis and r.result.diagnosis.findings
    ]  # a hung or failed run may keep no result
    assert with_diag
    f = with_diag[0].result.diagnosis.findings[0]
    assert isinstance(f, Finding) and (f.saving is None or isinstance(f.saving, Saving))
    broken = f.to_dict()
    del broken["command"]
    with pytest.raises(
        RecordError, match=r"^diagnosis\.findings\[0\]: missing command \(Finding\)$"
    ):
        DiagnosisBlock.from_dict({"findings": [broken]}, "diagnosis")


def test_an_older_record_is_refused_with_the_command_that_brings_it_up_to_date(tmp_path):
    """Readers read one schema version; a record of an earlier one (here: as version 2 wrote it,
    with a finding's
    `seed` and config nodes without `_target_`) is refused in one line naming `python -m
    base.upgrade`, which turns it into the current record byte for byte."""
    import re

    from base.upgrade import main as upgrade

    source = ROOT / "results/runs/ddp_knobs_vgg11/0/run_record.json"
    text = source.read_text()
    old = json.loads(text)
    old["schema_version"] = 2
    for group in ("model", "data", "optim", "logger"):
        del old["config"][group]["_target_"]
    for f in old["result"]["diagnosis"]["findings"]:
        items = [
            ("seed", re.sub(r"\bsource (00[0-4])", r"seed \1", v).replace("no source:", "no seed:"))
            if k == "matches"
            else (k, v)
            for k, v in f.items()
        ]
        f.clear()
        f.update(items)
    run = tmp_path / "sweep" / "0"
    run.mkdir(parents=True)
    (run / "run_record.json").write_text(json.dumps(old, indent=2))
    with pytest.raises(
        RecordError, match=r"schema_version 2, this tool reads 3: `python -m base\.upgrade .*0` "
    ):
        Record.read(run)
    assert upgrade([str(tmp_path / "sweep")]) == 0
    assert (run / "run_record.json").read_text() == text
    assert upgrade([str(tmp_path / "sweep")]) == 0  # once: a current record is left as it is
