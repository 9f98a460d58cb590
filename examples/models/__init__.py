"""The example scripts' own models package: named like the tool's `models`, it must be the one they import."""
import torch.nn as nn


def small_cnn(num_classes: int = 10) -> nn.Module:
    return nn.Sequential(nn.Conv2d(3, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                         nn.Conv2d(32, 64, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(4), nn.Flatten(),
                         nn.Linear(64 * 16, 256), nn.ReLU(), nn.Linear(256, num_classes))
