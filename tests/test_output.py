"""Issue 25: what a default run prints is short and answers first (the line-count of a real run is
in tests/test_train_runs.py::test_default_strategy_ddp_record)."""

from base.record_types import DiagnosisBlock
from base.record_types import Evidence, Finding, Saving
from job import brief


def _finding(i: int, first: bool = False) -> dict:
    return Finding(
        rule=f"r{i}",
        title=f"finding {i}",
        detail=f"why {i} in one sentence. More words that stay out.",
        evidence=[Evidence(name=f"e{k}", value=float(k), unit="ms") for k in range(8)],
        matches="no source",
        saving=Saving(0.1 * (5 - i), how="fewer syncs"),
        command=f"python train.py x={i}",
        first=first,
    ).to_dict()


def test_the_brief_diagnosis_keeps_its_budget_and_says_what_it_left_out():
    diag = {
        "findings": [_finding(0, first=True), *(_finding(i) for i in range(1, 6))],
        "inside_noise": [],
        "noise": {"floor": 0.05, "noisy": True, "reasons": ["step median known only to +-5%"]},
    }
    diag = DiagnosisBlock.from_dict(diag)
    lines = brief.diagnosis_lines(diag, budget=17, where="outputs/run")
    assert len(lines) <= 17
    assert lines[0].startswith("diagnosis: 5 finding(s) above the noise floor of 5.0%")
    assert (
        lines[1].startswith("   noisy: step median known only to +-5%")
        and "python train.py x=0" in lines[1]
    )
    assert (
        "1. finding 1" in lines
        and "2. finding 2" in lines
        and not any(line.startswith("3.") for line in lines)
    )
    assert sum("evidence: " in line for line in lines) == 2 * brief.MAX_EVIDENCE
    assert any(line.strip() == "why: why 1 in one sentence." for line in lines)
    assert lines[-1] == "(3 more finding(s): python -m diagnosis outputs/run, or verbose=true)"
    wide = brief.diagnosis_lines(diag, budget=100)
    assert sum(line[:2] in ("1.", "2.", "3.") for line in wide) == brief.MAX_FINDINGS


def test_the_sweep_terminal_table_has_five_columns_within_120_characters():
    """The committed 27-job knob sweep (9 configurations x 3 repeats), read back as the end of a
    sweep reads it."""
    from pathlib import Path

    from results.callbacks import TERMINAL_WIDTH, terminal_table
    from tables.sweep import sweep_entries
    from tables.table import build_table

    sweep = Path(__file__).resolve().parents[1] / "results" / "runs" / "ddp_knobs_vgg11"
    entries = sweep_entries(sweep)
    table = build_table(entries, first="job", title="knobs")
    lines = terminal_table(table, entries).splitlines()
    rows = [line for line in lines if line.startswith("|")]
    assert len(rows) == 2 + 9 and max(map(len, rows)) <= TERMINAL_WIDTH
    assert [c.strip() for c in rows[0].strip("|").split("|")] == [
        "configuration",
        "samples/s [95% CI]",
        "speed-up [95% CI]",
        "verdict",
        "top finding",
    ]
    assert any(r.startswith("| optim=powersgd bucket=25 ") for r in rows)
    assert rows[2].startswith("| optim=none bucket=25 ") and "| baseline " in rows[2]
    assert "sweep_table.md" in lines[-1]


def test_the_terminal_table_keeps_each_rows_configuration_whole():
    """The headline sweep (results/runs/headline_smoke_auto, judged on its pilot): wide intervals
    took the room and the configuration was cut to "optim=powersgd bucket=~" on three rows."""
    from pathlib import Path

    from results.callbacks import TERMINAL_WIDTH, terminal_table
    from tables.sweep import sweep_entries
    from tables.table import build_table

    sweep = Path(__file__).resolve().parents[1] / "results" / "runs" / "headline_smoke_auto"
    entries = sweep_entries(sweep)
    table = build_table(entries, first="job", title="headline")
    rows = [line for line in terminal_table(table, entries).splitlines() if line.startswith("|")]
    labels = [r.strip("|").split("|")[0].strip() for r in rows[2:]]
    assert len(labels) == 6 and max(map(len, rows)) <= TERMINAL_WIDTH
    assert sorted(labels) == sorted(
        f"optim={o} bucket={b}" for o in ("bf16", "powersgd") for b in (25, 100, 2000)
    )


def test_plots_state_their_question_keep_legends_off_the_data_and_give_busbw_error_bars(
    monkeypatch, tmp_path
):
    """The committed records drawn as the report draws them: titles that ask the question (not a
    timestamp), no annotation printed over another (the scaling efficiencies live in the legend),
    legends outside the axes, and busbw with error bars from the recorded per-block intervals."""
    from pathlib import Path

    from matplotlib.container import ErrorbarContainer

    from results import plots
    from tables.sweep import sweep_entries

    drawn = {}

    def keep(fig, path):
        fig.canvas.draw()
        drawn[Path(path).stem] = fig
        return path

    monkeypatch.setattr(plots, "_save", keep)
    runs = Path(__file__).resolve().parents[1] / "results" / "runs"
    knobs, scaling, coll = (
        sweep_entries(runs / d) for d in ("ddp_knobs_vgg11", "scaling_vgg11", "collectives")
    )
    plots.standard_plots(knobs, tmp_path, title="vm / cpu")
    plots.scaling(scaling, tmp_path / "scaling.png")
    plots.busbw(coll, tmp_path / "busbw.png")
    assert set(drawn) == {"throughput", "phases", "bucket", "scaling", "busbw"}

    def title(name):
        return drawn[name].axes[0].get_title()

    assert title("throughput") == "vgg11, 2 gloo ranks: throughput by optim and bucket\nvm / cpu"
    assert title("bucket").startswith(
        "vgg11, 2 gloo ranks: does the DDP bucket size change throughput?"
    )
    assert "how close to linear" in title("scaling") and "bus bandwidth by message size" in title(
        "busbw"
    )
    for name, fig in drawn.items():
        ax = fig.axes[0]
        box = ax.get_window_extent()
        for legend in [*fig.legends, *(a.get_legend() for a in fig.axes if a.get_legend())]:
            assert not legend.get_window_extent().overlaps(box), name  # outside the data
    assert not drawn["scaling"].axes[0].texts  # no efficiency printed at the points
    assert any("% at 2" in t.get_text() for t in drawn["scaling"].axes[0].get_legend().get_texts())
    bars = [c for c in drawn["busbw"].axes[0].containers if isinstance(c, ErrorbarContainer)]
    assert bars and any(len(seg) for c in bars for seg in c.lines[2][0].get_segments())
    assert "error bars" in drawn["busbw"].axes[0].get_xlabel()


def test_committed_diagnoses_say_each_next_command_once_and_nothing_the_device_lacks():
    """Issue 25: in every committed study's diagnosis (results/runs/*/diagnosis.txt, all CPU runs),
    no run's findings share a `next:` command, and none advises an H2D fix (there is no
    host-to-device copy on CPU)."""
    import re

    from tests.conftest import ROOT

    runs = 0
    for path in sorted((ROOT / "results" / "runs").glob("*/diagnosis.txt")):
        for block in re.split(r"\n--- job ", path.read_text())[1:]:
            runs += 1
            nexts = re.findall(r"^\s+next: (.+)$", block, re.M)
            assert len(nexts) == len(set(nexts)), (path.parent.name, block[:80])
            assert not any("h2d=" in n for n in nexts), (path.parent.name, block[:80])
    assert runs >= 80
