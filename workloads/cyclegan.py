"""CycleGAN (Zhu et al. 2017; monet2photo-style 256x256 images in Gavel's CycleGAN
workload) on synthetic image pairs: two ResNet generators, two PatchGAN discriminators."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from workloads.trainer import Family, Trainer, main


class ResBlock(nn.Module):
    def __init__(self, c: int) -> None:
        super().__init__()
        self.body = nn.Sequential(
            nn.ReflectionPad2d(1),
            nn.Conv2d(c, c, 3),
            nn.InstanceNorm2d(c),
            nn.ReLU(True),
            nn.ReflectionPad2d(1),
            nn.Conv2d(c, c, 3),
            nn.InstanceNorm2d(c),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.body(x)


def generator(ngf: int, blocks: int) -> nn.Module:
    layers: list[nn.Module] = [
        nn.ReflectionPad2d(3),
        nn.Conv2d(3, ngf, 7),
        nn.InstanceNorm2d(ngf),
        nn.ReLU(True),
    ]
    c = ngf
    for _ in range(2):  # down
        layers += [nn.Conv2d(c, c * 2, 3, 2, 1), nn.InstanceNorm2d(c * 2), nn.ReLU(True)]
        c *= 2
    layers += [ResBlock(c) for _ in range(blocks)]
    for _ in range(2):  # up
        layers += [
            nn.ConvTranspose2d(c, c // 2, 3, 2, 1, output_padding=1),
            nn.InstanceNorm2d(c // 2),
            nn.ReLU(True),
        ]
        c //= 2
    layers += [nn.ReflectionPad2d(3), nn.Conv2d(c, 3, 7), nn.Tanh()]
    return nn.Sequential(*layers)


def discriminator(ndf: int) -> nn.Module:
    return nn.Sequential(
        nn.Conv2d(3, ndf, 4, 2, 1),
        nn.LeakyReLU(0.2, True),
        nn.Conv2d(ndf, ndf * 2, 4, 2, 1),
        nn.InstanceNorm2d(ndf * 2),
        nn.LeakyReLU(0.2, True),
        nn.Conv2d(ndf * 2, ndf * 4, 4, 1, 1),
        nn.InstanceNorm2d(ndf * 4),
        nn.LeakyReLU(0.2, True),
        nn.Conv2d(ndf * 4, 1, 4, 1, 1),
    )


def build(batch_size: int, tiny: bool, device: torch.device) -> Trainer:
    ngf, blocks, size = (4, 1, 16) if tiny else (64, 9, 256)
    nets = nn.ModuleDict(
        {
            "g_ab": generator(ngf, blocks),
            "g_ba": generator(ngf, blocks),
            "d_a": discriminator(ngf),
            "d_b": discriminator(ngf),
        }
    ).to(device)
    opt_g = torch.optim.Adam(
        [*nets["g_ab"].parameters(), *nets["g_ba"].parameters()], lr=2e-4, betas=(0.5, 0.999)
    )
    opt_d = torch.optim.Adam(
        [*nets["d_a"].parameters(), *nets["d_b"].parameters()], lr=2e-4, betas=(0.5, 0.999)
    )

    def gan(pred: torch.Tensor, real: bool) -> torch.Tensor:  # LSGAN loss
        return F.mse_loss(pred, torch.full_like(pred, 1.0 if real else 0.0))

    def step() -> float:
        a = torch.rand(batch_size, 3, size, size, device=device).mul(2).sub(1)
        b = torch.rand(batch_size, 3, size, size, device=device).mul(2).sub(1)
        fake_b, fake_a = nets["g_ab"](a), nets["g_ba"](b)
        opt_g.zero_grad(set_to_none=True)
        loss_g = (
            gan(nets["d_b"](fake_b), True)
            + gan(nets["d_a"](fake_a), True)
            + 10 * F.l1_loss(nets["g_ba"](fake_b), a)
            + 10 * F.l1_loss(nets["g_ab"](fake_a), b)
        )
        loss_g.backward()
        opt_g.step()
        opt_d.zero_grad(set_to_none=True)
        loss_d = 0.5 * (
            gan(nets["d_a"](a), True)
            + gan(nets["d_a"](fake_a.detach()), False)
            + gan(nets["d_b"](b), True)
            + gan(nets["d_b"](fake_b.detach()), False)
        )
        loss_d.backward()
        opt_d.step()
        return loss_g.item()

    return Trainer(step=step, state={"model": nets, "optimizer": opt_g, "optimizer_d": opt_d})


FAMILY = Family("CycleGAN", (1,), build, fixed_type="CycleGAN")

if __name__ == "__main__":
    raise SystemExit(main(family=FAMILY))
