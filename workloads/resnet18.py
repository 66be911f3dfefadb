"""ResNet-18 on CIFAR-10-shaped synthetic images (Gavel's ResNet-18 workload)."""

from __future__ import annotations

import torch

from workloads._resnet import Basic, ResNet, image_classifier
from workloads.trainer import Family, Trainer, main


def build(batch_size: int, tiny: bool, device: torch.device) -> Trainer:
    if tiny:
        model = ResNet(Basic, [1, 1, 1, 1], width=4, classes=10, imagenet_stem=False)
        return image_classifier(model, min(batch_size, 4), 8, 10, device, lr=0.05)
    model = ResNet(Basic, [2, 2, 2, 2], width=64, classes=10, imagenet_stem=False)
    return image_classifier(model, batch_size, 32, 10, device, lr=0.1)


FAMILY = Family("ResNet-18", (16, 32, 64, 128, 256), build)

if __name__ == "__main__":
    raise SystemExit(main(family=FAMILY))
