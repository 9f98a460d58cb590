"""Model registry: `build_model(cfg.model)` for every conf/model/*.yaml. No weights are downloaded."""
from __future__ import annotations

import torch.nn as nn

from core.errors import ConfigError
from models.vgg import VGG

ARCHS = ("vgg", "torchvision", "vit", "timm")


def build_model(model_cfg, image_size: int = 224) -> nn.Module:
    arch = model_cfg.get("arch")
    if arch == "vgg":
        return VGG(list(model_cfg.layers), list(model_cfg.classifier), model_cfg.num_classes)
    if arch == "torchvision":
        import torchvision.models as tvm

        if model_cfg.name not in tvm.list_models():
            raise ConfigError(f"model.name={model_cfg.name!r} is not a torchvision model; see torchvision.models.list_models().")
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

        if not timm.list_models(model_cfg.name):
            raise ConfigError(
                f"model.name={model_cfg.name!r} is not a timm model. List them with: "
                "python -c \"import timm; print(timm.list_models('*vit*'))\""
            )
        return timm.create_model(model_cfg.name, pretrained=False, num_classes=model_cfg.num_classes)
    raise ConfigError(f"model.arch={arch!r} is unknown; choose one of {', '.join(ARCHS)}.")
