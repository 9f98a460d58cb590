import pytest
import torch
from omegaconf import OmegaConf

from base.errors import ConfigError
from models import build_model
from tests.conftest import CONF


def load(choice, **over):
    cfg = OmegaConf.load(CONF / "model" / f"{choice}.yaml")
    cfg.update(over)
    return cfg


def test_vgg11_is_the_threads_model():
    with torch.device("meta"):  # shapes only: no 0.5 GB of weights to allocate and initialise
        m = build_model(load("vgg11"))
    params = list(m.parameters())
    assert len(params) == 22
    classifier = sum(p.numel() for p in m.classifier.parameters())
    assert classifier == 123_642_856
    assert classifier * 4 / 2**20 == pytest.approx(
        471.66, abs=0.01
    )  # the thread's "471MB" of gradients
    assert [type(layer).__name__ for layer in m.classifier] == ["Linear"] * 3


def test_vit_l_32_parameter_count():
    with torch.device("meta"):
        m = build_model(load("vit_l_32"))
    assert sum(p.numel() for p in m.parameters()) == 306_535_400


@pytest.mark.parametrize("name,size", [("vgg11_tiny", 32), ("vit_tiny", 32), ("timm_tiny", 160)])
def test_tiny_variants_run_forward_and_backward(name, size):
    cfg = load(name)
    m = build_model(cfg, image_size=size)
    out = m(torch.randn(2, 3, size, size))
    assert out.shape == (2, cfg.num_classes)
    out.sum().backward()


def test_vgg11_tiny_has_the_same_structure():
    assert len(list(build_model(load("vgg11_tiny")).parameters())) == 22


def test_unknown_timm_model_names_the_fix():
    with pytest.raises(ConfigError, match="is not a timm model"):
        build_model(load("timm", name="not_a_model_xyz"))
