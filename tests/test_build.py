"""base.build: what users swap is instantiated with the run's own arguments, passed on as data."""

from base.build import build

SEEN = {}


def log_run(record, cfg=None):
    SEEN["record"], SEEN["cfg"] = record, cfg
    return "logged"


def test_a_runtime_argument_holding_targets_is_data_not_built():
    """The logger gets the run record, whose config names the model's `_target_`: Hydra's recursive
    instantiation built the model from it (and failed on its descriptive keys), so no run reached
    W&B."""
    model = {"_target_": "models.vgg.VGG", "arch": "vgg11", "num_classes": 10}
    record = {"status": "ok", "config": {"model": model}}
    assert (
        build({"_target_": "tests.test_build.log_run"}, record=record, cfg={"name": "wandb"})
        == "logged"
    )
    assert SEEN["record"] == record and isinstance(SEEN["record"]["config"]["model"], dict)
    assert SEEN["cfg"] == {"name": "wandb"}


def test_a_runtime_argument_keeps_its_interpolation_text(monkeypatch):
    """The record keeps `${oc.env:...}` as typed (a secret's value is written nowhere); handing it
    to the logger must not resolve it."""
    monkeypatch.setenv("BUILD_SECRET", "value-123")
    record = {"config": {"logger": {"project": "${oc.env:BUILD_SECRET}"}}}
    build({"_target_": "tests.test_build.log_run", "cfg": "${oc.env:BUILD_SECRET}"}, record=record)
    assert SEEN["record"]["config"]["logger"]["project"] == "${oc.env:BUILD_SECRET}"


def test_the_node_keys_and_the_runtime_arguments_both_arrive():
    def make(width: int, image_size: int):
        return width, image_size

    import tests.test_build as me

    me.make = make
    assert build(
        {"_target_": "tests.test_build.make", "width": 3, "arch": "x"}, image_size=32, seed=1
    ) == (3, 32)
