"""The score network: a ResNet-style tabular MLP (Gorishniy et al. 2021), DESIGN 3.3.

Output size equals input size: f(x) estimates sigma * grad log p(x) per
feature. No noise or time conditioning (single-scale DSM).

>>> import torch
>>> net = ScoreNet(d=4, width=16, depth=2).eval()
>>> tuple(net(torch.zeros(3, 4)).shape)
(3, 4)
"""

from __future__ import annotations

import torch
from torch import nn


class Dropout(nn.Module):
    """``nn.Dropout`` semantics (zero with probability p, scale the rest by 1/(1-p); identity in eval).

    Why not ``nn.Dropout``: on CPU its mask comes from ``bernoulli_``, which measured 33% of a
    training step of the 512x6 network (more than every matmul together); a mask from
    ``torch.rand`` has the same distribution at about half the cost (``kdsm bench train``).

    >>> d = Dropout(0.25).train()
    >>> _ = torch.manual_seed(0)
    >>> y = d(torch.ones(100_000))
    >>> bool(torch.allclose(y[y != 0], torch.tensor(1 / 0.75))), round(float((y == 0).float().mean()), 2)
    (True, 0.25)
    >>> bool(torch.equal(d.eval()(torch.ones(3)), torch.ones(3)))
    True
    """

    def __init__(self, p: float):
        super().__init__()
        if not 0 <= p < 1:
            raise ValueError(f"dropout probability must be in [0, 1), got {p}")
        self.p = p

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.training or self.p == 0:
            return x
        keep = torch.rand(x.shape, device=x.device) >= self.p
        return x * (keep.to(x.dtype) * (1.0 / (1.0 - self.p)))

    def extra_repr(self) -> str:
        return f"p={self.p}"


class ResidualBlock(nn.Module):
    """BatchNorm -> Linear -> ReLU -> Dropout -> Linear -> Dropout, plus the block input."""

    def __init__(self, width: int, dropout_hidden: float, dropout_residual: float):
        super().__init__()
        self.body = nn.Sequential(
            nn.BatchNorm1d(width),
            nn.Linear(width, width),
            nn.ReLU(),
            Dropout(dropout_hidden),
            nn.Linear(width, width),
            Dropout(dropout_residual),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.body(x)


class ScoreNet(nn.Module):
    def __init__(self, d: int, width: int = 512, depth: int = 6, dropout_hidden: float = 0.2,
                 dropout_residual: float = 0.1):
        super().__init__()
        self.d, self.width, self.depth = d, width, depth
        self.stem = nn.Linear(d, width)
        self.blocks = nn.Sequential(*[ResidualBlock(width, dropout_hidden, dropout_residual) for _ in range(depth)])
        self.head = nn.Sequential(nn.BatchNorm1d(width), nn.ReLU(), nn.Linear(width, d))

    @classmethod
    def from_config(cls, d: int, cfg) -> ScoreNet:
        return cls(d, cfg.width, cfg.depth, cfg.dropout_hidden, cfg.dropout_residual)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.blocks(self.stem(x)))


def resolve_device(spec: str = "auto") -> torch.device:
    """``auto`` = CUDA when present, else CPU; anything else is passed to torch.device."""
    if spec == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    dev = torch.device(spec)
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"device {spec!r} requested but CUDA is not available")
    return dev


def bf16_supported(device: torch.device) -> bool:
    """Whether bf16 autocast runs natively (AVX-512 BF16/AMX on CPU, Ampere+ on CUDA)."""
    if device.type == "cuda":
        return torch.cuda.is_bf16_supported()
    try:
        return bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
    except (AttributeError, RuntimeError):
        return False
