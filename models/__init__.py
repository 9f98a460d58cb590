"""Model registry: `build_model(cfg.model)` for every conf/model/*.yaml. No weights are downloaded."""
from __future__ import annotations

import torch.nn as nn

from base.errors import ConfigError
from models.vgg import VGG


NAMED_ARCHS = ("torchvision", "timm")    # the archs that build the model model.name names; vgg and vit build from
                                          # their own keys (layers, patch_size, ...) and keep model.name as a label


def check(model_cfg) -> None:
    """Before any rank starts (and again in build_model): the arch fits the model's schema and the name exists, or,
    for an arch that does not read model.name, is the option's own (a typed model.name=vit_b_16 on model=vgg11 would
    train VGG11 and record vit_b_16)."""
    from omegaconf import DictConfig, OmegaConf

    from base.schema import MODEL_SCHEMAS

    arch, name = model_cfg.get("arch"), str(model_cfg.get("name"))
    if isinstance(model_cfg, DictConfig) and OmegaConf.get_type(model_cfg) not in (None, dict):
        built_for = OmegaConf.get_type(model_cfg)
        if MODEL_SCHEMAS[arch] is not built_for:
            fits = ", ".join(str(a) for a, s in MODEL_SCHEMAS.items() if s is built_for)
            raise ConfigError(f"model.arch={arch} does not fit model={model_cfg.name}, a config for arch {fits}. "
                              f"Pick a model= whose arch is {arch} instead of changing model.arch.")
    if arch not in NAMED_ARCHS:
        own = option_names(arch)
        if own and name not in own:
            which = (f"model={own[0]} (arch {arch}) builds its network from its own keys and does not" if len(own) == 1
                     else f"model={' and model='.join(own)} (arch {arch}) build their network from their own keys and "
                          "do not")
            raise ConfigError(f"model.name={name}: {which} use model.name, so this run would train that {arch} model "
                              f"and record it as {name}. " + where_name_belongs(name))
        return
    if arch == "torchvision" and name not in torchvision_names():
        guess = _nearest(name, torchvision_names())
        other = " It is a timm model: model=timm model.name=" + name + "." if timm_names(name) else ""
        raise ConfigError(f"model.name={name!r} is not a torchvision model" + (f"; nearest: {', '.join(guess)}"
                          if guess else "") + f" (all: torchvision.models.list_models()).{other}")
    if arch == "timm" and not timm_names(name):
        guess = _nearest(name, timm_names())
        other = (" It is a torchvision model: model=torchvision model.name=" + name + "."
                 if name in torchvision_names() else "")
        raise ConfigError(f"model.name={name!r} is not a timm model" + (f"; nearest: {', '.join(guess)}" if guess
                          else "") + ". List them with: python -c \"import timm; print(timm.list_models('*vit*'))\""
                          + other)


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
    groups = [g for g, has in (("torchvision", name in torchvision_names()), ("timm", bool(timm_names(name)))) if has]
    if groups:
        return (f"{name} is a {' and a '.join(groups)} model: "
                + " or ".join(f"model={g} model.name={name}" for g in groups) + ".")
    return ("It is neither a torchvision nor a timm model name; for one of those, use model=torchvision or model=timm "
            "with model.name=<its name>.")


def _nearest(name: str, names: list[str], n: int = 3) -> list[str]:
    import difflib

    return difflib.get_close_matches(name, names, n=n, cutoff=0.6)


def parameter_count(model_cfg, image_size: int = 224) -> int:
    """Trainable parameters, from the model built on the meta device (shapes only, no memory)."""
    import torch

    try:
        with torch.device("meta"):
            model = build_model(model_cfg, image_size)
    except (RuntimeError, NotImplementedError):     # a model whose __init__ reads tensor values: build it for real
        model = build_model(model_cfg, image_size)
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


def build_model(model_cfg, image_size: int = 224) -> nn.Module:
    check(model_cfg)
    arch = model_cfg.get("arch")
    if arch == "vgg":
        return VGG(list(model_cfg.layers), list(model_cfg.classifier), model_cfg.num_classes)
    if arch == "torchvision":
        import torchvision.models as tvm

        kwargs = {"weights": None, "num_classes": model_cfg.num_classes}
        if model_cfg.name.startswith("vit_"):
            kwargs["image_size"] = image_size  # ViT's position embedding is sized for the input; params change with it
        return tvm.get_model(model_cfg.name, **kwargs)
    if arch == "vit":
        from torchvision.models.vision_transformer import VisionTransformer

        return VisionTransformer(
            image_size=image_size, patch_size=model_cfg.patch_size, num_layers=model_cfg.num_layers,
            num_heads=model_cfg.num_heads, hidden_dim=model_cfg.hidden_dim, mlp_dim=model_cfg.mlp_dim,
            num_classes=model_cfg.num_classes,
        )
    if arch == "timm":
        import timm

        return timm.create_model(model_cfg.name, pretrained=False, num_classes=model_cfg.num_classes)
    from base.schema import Arch

    raise ConfigError(f"model.arch={arch!r} is unknown; choose one of {', '.join(Arch)}.")
