"""ResNet (He et al. 2016) for the ResNet-18 and ResNet-50 workloads, written compactly."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from workloads.trainer import Trainer


class Basic(nn.Module):
    expansion = 1

    def __init__(self, cin: int, width: int, stride: int) -> None:
        super().__init__()
        cout = width * self.expansion
        self.body = nn.Sequential(
            nn.Conv2d(cin, width, 3, stride, 1, bias=False),
            nn.BatchNorm2d(width),
            nn.ReLU(True),
            nn.Conv2d(width, cout, 3, 1, 1, bias=False),
            nn.BatchNorm2d(cout),
        )
        self.skip = _shortcut(cin, cout, stride)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.relu(self.body(x) + self.skip(x))


class Bottleneck(nn.Module):
    expansion = 4

    def __init__(self, cin: int, width: int, stride: int) -> None:
        super().__init__()
        cout = width * self.expansion
        self.body = nn.Sequential(
            nn.Conv2d(cin, width, 1, bias=False),
            nn.BatchNorm2d(width),
            nn.ReLU(True),
            nn.Conv2d(width, width, 3, stride, 1, bias=False),
            nn.BatchNorm2d(width),
            nn.ReLU(True),
            nn.Conv2d(width, cout, 1, bias=False),
            nn.BatchNorm2d(cout),
        )
        self.skip = _shortcut(cin, cout, stride)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.relu(self.body(x) + self.skip(x))


def _shortcut(cin: int, cout: int, stride: int) -> nn.Module:
    if stride == 1 and cin == cout:
        return nn.Identity()
    return nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))


class ResNet(nn.Module):
    def __init__(
        self,
        block: type[Basic] | type[Bottleneck],
        layers: list[int],
        width: int,
        classes: int,
        imagenet_stem: bool,
    ) -> None:
        super().__init__()
        if imagenet_stem:  # 224x224 inputs: 7x7/2 conv + max pool
            stem: list[nn.Module] = [
                nn.Conv2d(3, width, 7, 2, 3, bias=False),
                nn.BatchNorm2d(width),
                nn.ReLU(True),
                nn.MaxPool2d(3, 2, 1),
            ]
        else:  # CIFAR 32x32 inputs: 3x3 conv
            stem = [nn.Conv2d(3, width, 3, 1, 1, bias=False), nn.BatchNorm2d(width), nn.ReLU(True)]
        blocks: list[nn.Module] = []
        cin = width
        for i, n in enumerate(layers):
            w = width * 2**i
            for j in range(n):
                blocks.append(block(cin, w, 2 if (j == 0 and i > 0) else 1))
                cin = w * block.expansion
        self.features = nn.Sequential(*stem, *blocks, nn.AdaptiveAvgPool2d(1), nn.Flatten())
        self.fc = nn.Linear(cin, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(self.features(x))


def image_classifier(
    model: nn.Module, batch: int, size: int, classes: int, device: torch.device, lr: float
) -> Trainer:
    """SGD with momentum on random images; batches drawn on the model's device (trainer.py)."""
    model = model.to(device)
    opt = torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9, weight_decay=5e-4)

    def loss() -> torch.Tensor:
        x = torch.randn(batch, 3, size, size, device=device)
        y = torch.randint(0, classes, (batch,), device=device)
        return F.cross_entropy(model(x), y)

    return Trainer.of(model, opt, loss)
