"""ResNet-50 on ImageNet-shaped synthetic images (Gavel's ResNet-50 workload)."""

from __future__ import annotations

import torch

from workloads._resnet import Bottleneck, ResNet, image_classifier
from workloads.trainer import Family, Trainer, main


def build(batch_size: int, tiny: bool, device: torch.device) -> Trainer:
    if tiny:
        model = ResNet(Bottleneck, [1, 1, 1, 1], width=4, classes=10, imagenet_stem=True)
        return image_classifier(model, min(batch_size, 2), 32, 10, device, lr=0.05)
    model = ResNet(Bottleneck, [3, 4, 6, 3], width=64, classes=1000, imagenet_stem=True)
    return image_classifier(model, batch_size, 224, 1000, device, lr=0.1)


FAMILY = Family("ResNet-50", (16, 32, 64, 128), build)

if __name__ == "__main__":
    raise SystemExit(main(family=FAMILY))
