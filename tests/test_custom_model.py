"""model=custom: the user's own nn.Module, named by model._target_, trained like any model of the
project. The class below lives in this test file, as a user's would live in their own package."""

import pytest
import torch.nn as nn

from models import build_model
from tests.bad_input import refused
from tests.conftest import compose, run_inprocess

TARGET = "tests.test_custom_model.TinyNet"
CUSTOM = [
    "model=custom",
    f"model._target_={TARGET}",
    "model.input_shape=[3,8,8]",
    "model.num_classes=5",
]


class TinyNet(nn.Module):
    """A user's model: it takes what it needs (num_classes, input_shape) and nothing of the
    project's."""

    def __init__(self, num_classes: int, input_shape: list[int]):
        super().__init__()
        c, h, w = input_shape
        self.body = nn.Sequential(
            nn.Conv2d(c, 4, 3, padding=1),
            nn.ReLU(),
            nn.Flatten(),
            nn.Linear(4 * h * w, 16),
            nn.ReLU(),
            nn.Linear(16, num_classes),
        )

    def forward(self, x):
        return self.body(x)


def test_the_custom_model_is_built_from_its_target():
    model = build_model(compose(CUSTOM).model)
    assert isinstance(model, TinyNet) and model.body[-1].out_features == 5


def test_a_new_arch_is_one_yaml_file_of_a_target():
    """What conf/model/<arch>.yaml holds: a _target_ and its keys (here torchvision's resnet18
    through the project's torchvision target, named by the file alone)."""
    cfg = compose(["model=torchvision", "model.name=resnet18", "model.num_classes=7"])
    assert cfg.model._target_ == "models.torchvision_model"
    assert build_model(cfg.model).fc.out_features == 7


def test_a_custom_target_that_cannot_be_imported_is_one_line_before_any_rank():
    line = refused(
        [
            "model=custom",
            "model._target_=my_pkg.nowhere.Net",
            "model.input_shape=[3,8,8]",
            "model.num_classes=5",
        ]
    )
    assert "my_pkg.nowhere.Net cannot be imported" in line and "\n" not in line


def test_model_custom_alone_is_an_example_target():
    """model=custom without a _target_ of the user's builds the example the YAML names (a
    torchvision class taking num_classes), so the option composes, resolves and runs as it is."""
    cfg = compose(["model=custom", "model.num_classes=3"])
    assert build_model(cfg.model).fc.out_features == 3


@pytest.mark.slow
def test_a_model_class_defined_in_a_test_trains_on_two_gloo_ranks(tmp_path):
    record, code = run_inprocess([*CUSTOM, "scale=smoke", "logger=none", "world_size=2"], tmp_path)
    assert code == 0 and record["status"] == "ok", record and record.get("error")
    r = record["result"]
    assert r["world_size"] == 2 and r["steps"] >= 6 and r["comm"]["bytes_per_step"] > 0
    assert record["config"]["model"]["_target_"] == TARGET
