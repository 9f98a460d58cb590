"""Models: `build_model(cfg.model)` instantiates what conf/model/<name>.yaml's `_target_` names (a
new model is one YAML file; model=custom is the user's own nn.Module). No weights are downloaded."""

from __future__ import annotations

from base.record import setting
from functools import lru_cache

import torch.nn as nn

from base.build import build, target_of
from base.errors import ConfigError


NAMED_ARCHS = (
    "torchvision",
    "timm",
)  # the archs that build the model model.name names; vgg and vit build from
# their own keys (layers, patch_size, ...) and keep model.name as a label


def check(model_cfg) -> None:
    """Before any rank starts (and again in build_model): the arch fits the model's schema and the
    name exists, or, for an arch that does not read model.name, is the option's own (a typed
    model.name=vit_b_16 on model=vgg11 would train VGG11 and record vit_b_16)."""
    from omegaconf import DictConfig, OmegaConf

    from base.schema import MODEL_SCHEMAS

    arch, name = model_cfg.get("arch"), str(model_cfg.get("name"))
    if isinstance(model_cfg, DictConfig) and OmegaConf.get_type(model_cfg) not in (None, dict):
        built_for = OmegaConf.get_type(model_cfg)
        if arch in MODEL_SCHEMAS and MODEL_SCHEMAS[arch] is not built_for:
            fits = ", ".join(str(a) for a, s in MODEL_SCHEMAS.items() if s is built_for)
            raise ConfigError(
                f"model.arch={arch} does not fit model={model_cfg.name}, a config for arch {fits}. "
                f"Pick a model= whose arch is {arch} instead of changing model.arch."
            )
    if arch == "custom" or arch not in MODEL_SCHEMAS:  # the user's own: its target must import
        target_of(model_cfg)
        return
    if arch not in NAMED_ARCHS:
        own = option_names(arch)
        if own and name not in own:
            which = (
                f"model={own[0]} (arch {arch}) builds its network from its own keys and does not"
                if len(own) == 1
                else f"model={' and model='.join(own)} (arch {arch}) build their network from "
                "their own keys and "
                "do not"
            )
            raise ConfigError(
                f"model.name={name}: {which} use model.name, so this run would train that {arch} "
                "model "
                f"and record it as {name}. " + where_name_belongs(name)
            )
        return
    if arch == "torchvision" and name not in torchvision_names():
        guess = _nearest(name, torchvision_names())
        other = (
            " It is a timm model: model=timm model.name=" + name + "." if timm_names(name) else ""
        )
        raise ConfigError(
            f"model.name={name!r} is not a torchvision model"
            + (f"; nearest: {', '.join(guess)}" if guess else "")
            + f" (all: torchvision.models.list_models()).{other}"
        )
    if arch == "timm" and not timm_names(name):
        guess = _nearest(name, timm_names())
        other = (
            " It is a torchvision model: model=torchvision model.name=" + name + "."
            if name in torchvision_names()
            else ""
        )
        raise ConfigError(
            f"model.name={name!r} is not a timm model"
            + (f"; nearest: {', '.join(guess)}" if guess else "")
            + ". List them with: python -c \"import timm; print(timm.list_models('*vit*'))\""
            + other
        )


def option_names(arch: str) -> list[str]:
    """The model= options (conf/model/*.yaml) of an arch: the names its models may carry."""
    from omegaconf import OmegaConf

    from base.schema import CONF_DIR

    options = [OmegaConf.load(f) for f in sorted((CONF_DIR / "model").glob("*.yaml"))]
    return [str(o.name) for o in options if o.get("arch") == arch]


def torchvision_names() -> list[str]:
    import torchvision.models as tvm

    return tvm.list_models()


def timm_names(pattern: str = "") -> list[str]:
    import timm

    return timm.list_models(pattern) if pattern else timm.list_models()


def where_name_belongs(name: str) -> str:
    """Which group takes a model name: model=torchvision and/or model=timm, or neither."""
    groups = [
        g
        for g, has in (
            ("torchvision", name in torchvision_names()),
            ("timm", bool(timm_names(name))),
        )
        if has
    ]
    if groups:
        return (
            f"{name} is a {' and a '.join(groups)} model: "
            + " or ".join(f"model={g} model.name={name}" for g in groups)
            + "."
        )
    return (
        "It is neither a torchvision nor a timm model name; for one of those, use "
        "model=torchvision or model=timm "
        "with model.name=<its name>."
    )


def _nearest(name: str, names: list[str], n: int = 3) -> list[str]:
    import difflib

    return difflib.get_close_matches(name, names, n=n, cutoff=0.6)


def gradient_bytes(model_cfg, image_size: int = 224) -> int:
    """fp32 bytes of the model's trainable parameters (one step's gradients), counted on the meta
    device (no memory); once per model and process (a sweep checks every job; ViT-L takes seconds to
    build)."""
    from omegaconf import OmegaConf

    return _gradient_bytes(OmegaConf.to_yaml(model_cfg), image_size)


@lru_cache(maxsize=16)
def _gradient_bytes(model_yaml: str, image_size: int) -> int:
    import torch
    from omegaconf import OmegaConf

    model_cfg = OmegaConf.create(model_yaml)
    try:
        with torch.device("meta"):
            model = build_model(model_cfg, image_size)
    except (
        RuntimeError,
        NotImplementedError,
    ):  # a model whose __init__ reads tensor values: build it for real
        model = build_model(model_cfg, image_size)
    return 4 * sum(p.numel() for p in model.parameters() if p.requires_grad)


def input_shape(cfg) -> tuple[int, ...]:
    """One sample's shape as the model takes it: model.input_shape when the model says
    (model=custom), else an image of data.image_size (3 x image_size x image_size)."""
    shape = setting(cfg, "model.input_shape")
    if shape:
        return tuple(int(n) for n in shape)
    size = int(cfg.data.image_size)
    return (3, size, size)


def build_model(model_cfg, image_size: int = 224) -> nn.Module:
    """The model model_cfg's `_target_` makes (base/build.py: its keys and image_size, where it
    takes them)."""
    check(model_cfg)
    model = build(model_cfg, image_size=image_size)
    if not isinstance(model, nn.Module):
        raise ConfigError(
            f"model._target_={model_cfg.get('_target_')} returned {type(model).__name__}, not a "
            "torch.nn.Module. Point it at an nn.Module class or a function that returns one."
        )
    return model


# ----------------------------------------------------------------- the targets of conf/model/*.yaml
def torchvision_model(name: str, num_classes: int, image_size: int = 224) -> nn.Module:
    """Any torchvision classification model by name, random weights (no download); ViTs sized for
    the input."""
    import torchvision.models as tvm

    kwargs = {"weights": None, "num_classes": num_classes}
    if name.startswith("vit_"):
        kwargs["image_size"] = (
            image_size  # ViT's position embedding is sized for the input; params change with it
        )
    return tvm.get_model(name, **kwargs)


def vit(
    patch_size: int,
    num_layers: int,
    num_heads: int,
    hidden_dim: int,
    mlp_dim: int,
    num_classes: int,
    image_size: int = 224,
) -> nn.Module:
    """torchvision's VisionTransformer with the given dimensions."""
    from torchvision.models.vision_transformer import VisionTransformer

    return VisionTransformer(
        image_size=image_size,
        patch_size=patch_size,
        num_layers=num_layers,
        num_heads=num_heads,
        hidden_dim=hidden_dim,
        mlp_dim=mlp_dim,
        num_classes=num_classes,
    )


def timm_model(name: str, num_classes: int) -> nn.Module:
    """Any timm model by name, random weights (no hub download)."""
    import timm

    return timm.create_model(name, pretrained=False, num_classes=num_classes)
