"""The VGG of the 16-node thread: ReLU convs without batch norm, a classifier of three Linear layers
(no ReLU/dropout, as in the thread's code). At 224x224 the features end at 512x7x7; the adaptive
pool keeps that shape for smaller test inputs without adding parameters, so gradient bytes are the
same at any input size."""

from __future__ import annotations

import torch
import torch.nn as nn


class VGG(nn.Module):
    def __init__(self, layers: list, classifier: list[int], num_classes: int):
        super().__init__()
        convs: list[nn.Module] = []
        in_ch = 3
        for v in layers:
            if v == "M":
                convs.append(nn.MaxPool2d(kernel_size=2, stride=2))
            else:
                convs += [nn.Conv2d(in_ch, int(v), kernel_size=3, padding=1), nn.ReLU(inplace=True)]
                in_ch = int(v)
        self.features = nn.Sequential(*convs)
        self.pool = nn.AdaptiveAvgPool2d((7, 7))
        widths = [in_ch * 7 * 7, *classifier, num_classes]
        self.classifier = nn.Sequential(*[nn.Linear(a, b) for a, b in zip(widths[:-1], widths[1:])])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(torch.flatten(self.pool(self.features(x)), 1))
