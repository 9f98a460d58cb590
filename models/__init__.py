"""Model registry: `build_model(cfg.model)` for every conf/model/*.yaml. No weights are downloaded."""
from __future__ import annotations

import torch.nn as nn

from core.errors import ConfigError
from models.vgg import VGG


def check(model_cfg) -> None:
    """Before any rank starts (and again in build_model): the arch fits the model's schema and the name exists."""
    from omegaconf import DictConfig, OmegaConf

    from core.schema import MODEL_SCHEMAS

    arch = model_cfg.get("arch")
    if isinstance(model_cfg, DictConfig) and OmegaConf.get_type(model_cfg) not in (None, dict):
        built_for = OmegaConf.get_type(model_cfg)
        if MODEL_SCHEMAS[arch] is not built_for:
            fits = ", ".join(str(a) for a, s in MODEL_SCHEMAS.items() if s is built_for)
            raise ConfigError(f"model.arch={arch} does not fit model={model_cfg.name}, a config for arch {fits}. "
                              f"Pick a model= whose arch is {arch} instead of changing model.arch.")
    if arch == "torchvision":
        import torchvision.models as tvm

        if model_cfg.name not in tvm.list_models():
            raise ConfigError(f"model.name={model_cfg.name!r} is not a torchvision model; see "
                              "torchvision.models.list_models().")
    if arch == "timm":
        import timm

        if not timm.list_models(model_cfg.name):
            raise ConfigError(
                f"model.name={model_cfg.name!r} is not a timm model. List them with: "
                "python -c \"import timm; print(timm.list_models('*vit*'))\""
            )


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
    from core.schema import Arch

    raise ConfigError(f"model.arch={arch!r} is unknown; choose one of {', '.join(Arch)}.")
