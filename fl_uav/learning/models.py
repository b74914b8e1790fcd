"""Onboard vision models (small CNNs for the downward camera's land-cover task)."""

from __future__ import annotations

import torch
from torch import nn

from fl_uav.learning.choices import MODEL_NAMES


class SmallCnn(nn.Module):
    """Three conv blocks and two linear layers for 3×32×32 inputs (about 0.2 M parameters)."""

    def __init__(self, num_classes: int, in_channels: int = 3, input_px: int = 32,
                 width: int = 16) -> None:
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(in_channels, width, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(width, 2 * width, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(2 * width, 4 * width, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        )
        flat = 4 * width * (input_px // 8) ** 2
        self.classifier = nn.Sequential(
            nn.Flatten(), nn.Linear(flat, 128), nn.ReLU(), nn.Linear(128, num_classes))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(self.features(x))


class TinyCnn(nn.Module):
    """One conv block and a linear head: for fast tests."""

    def __init__(self, num_classes: int, in_channels: int = 3, input_px: int = 32) -> None:
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(in_channels, 8, 3, padding=1), nn.ReLU(), nn.MaxPool2d(4))
        self.classifier = nn.Sequential(
            nn.Flatten(), nn.Linear(8 * (input_px // 4) ** 2, num_classes))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(self.features(x))


class DigitsCnn(nn.Module):
    """The CNN of the Flower yardstick (two 3×3 convs, one max-pool, two linear layers)."""

    def __init__(self, num_classes: int, in_channels: int = 1, input_px: int = 8) -> None:
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(in_channels, 16, 3, padding=1), nn.ReLU(),
            nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2))
        self.classifier = nn.Sequential(
            nn.Flatten(), nn.Linear(32 * (input_px // 2) ** 2, 64), nn.ReLU(),
            nn.Linear(64, num_classes))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(self.features(x))


class LeNet5(nn.Module):
    """LeNet-5: two 5×5 conv layers and three linear layers (120, 84, classes), the model
    FedEx Sec. VII-A trains on FMNIST and SVHN ("two convolutional layers and three fully
    connected layers"). The first convolution pads by 2, so a 28×28 input keeps LeNet's
    classic 16×5×5 feature map; other sizes get the flat size their geometry gives."""

    def __init__(self, num_classes: int, in_channels: int = 1, input_px: int = 28) -> None:
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(in_channels, 6, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(6, 16, 5), nn.ReLU(), nn.MaxPool2d(2),
        )
        side_px = (input_px // 2 - 4) // 2
        if side_px < 1:
            raise ValueError(f'lenet5 needs inputs of at least 12 px, got {input_px}')
        self.classifier = nn.Sequential(
            nn.Flatten(), nn.Linear(16 * side_px ** 2, 120), nn.ReLU(),
            nn.Linear(120, 84), nn.ReLU(), nn.Linear(84, num_classes))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(self.features(x))


def build_model(name: str, num_classes: int, input_px: int = 32, seed: int = 0,
                in_channels: int = 3) -> nn.Module:
    """Build a model by name with deterministic initial weights."""
    generator_state = torch.random.get_rng_state()
    torch.manual_seed(seed)
    try:
        if name == 'small_cnn':
            model = SmallCnn(num_classes, in_channels, input_px=input_px)
        elif name == 'tiny_cnn':
            model = TinyCnn(num_classes, in_channels, input_px=input_px)
        elif name == 'digits_cnn':
            model = DigitsCnn(num_classes, in_channels, input_px=input_px)
        elif name == 'lenet5':
            model = LeNet5(num_classes, in_channels, input_px=input_px)
        else:
            raise ValueError(f'unknown model {name!r}; choices: {", ".join(MODEL_NAMES)}')
    finally:
        torch.random.set_rng_state(generator_state)
    return model
