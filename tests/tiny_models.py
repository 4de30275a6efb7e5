"""Small models reachable as `tests.tiny_models:CALLABLE` from test configs (the `module:callable` path)."""
import torch
from torch import nn


class ResidualMLP(nn.Module):
    def __init__(self, width: int = 16):
        super().__init__()
        self.fc1 = nn.Linear(8, width)
        self.fc2 = nn.Linear(width, width)
        self.out = nn.Linear(width, 1)

    def forward(self, x):
        h = self.fc1(x)
        h += self.fc2(torch.relu(h))  # functional relu and in-place residual add, outside leaf modules
        return self.out(h).flatten()


def make_mlp(width: int = 16) -> nn.Module:
    return ResidualMLP(width)


def explode(**kwargs):
    raise RuntimeError("this factory always fails")


class Picky(nn.Module):
    """A leaf module that only accepts positive inputs: it runs inside its model (which feeds it ``x.abs() + 1``) but
    fails when replayed on random inputs, as a configuration that cannot be replayed does."""

    def forward(self, x):
        if not bool((x > 0).all()):
            raise ValueError("picky: inputs must be positive")
        return x * 2


class PickyNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)
        self.picky = Picky()

    def forward(self, x):
        return self.picky(self.fc(x).abs() + 1).sum(dim=1)


def make_picky() -> nn.Module:
    return PickyNet()
