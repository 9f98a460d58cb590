"""base.build: what users swap is instantiated with the run's own arguments, and those arguments are passed on as data."""
from base.build import build

SEEN = {}


def log_run(record, cfg=None):
    SEEN["record"], SEEN["cfg"] = record, cfg
    return "logged"


def test_a_runtime_argument_holding_targets_is_data_not_built():
    """The logger gets the run record, whose config names the model's `_target_`: Hydra's recursive instantiation
    built the model from it (and failed on its descriptive keys), so no run reached W&B."""
    model = {"_target_": "models.vgg.VGG", "arch": "vgg11", "num_classes": 10}
    record = {"status": "ok", "config": {"model": model}}
    assert build({"_target_": "tests.test_build.log_run"}, record=record, cfg={"name": "wandb"}) == "logged"
    assert SEEN["record"] == record and isinstance(SEEN["record"]["config"]["model"], dict)
    assert SEEN["cfg"] == {"name": "wandb"}
