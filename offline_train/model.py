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

    Why not ``nn.Dropout``: on CPU its mask comes from ``bernoulli_``, and even ``torch.rand`` costs one
    Mersenne-Twister draw per element, which measured a quarter of a training step of the 256x6
    network. Here one 64-bit draw serves four elements (a 16-bit uniform each), 2.7x faster per mask;
    p is rounded to a multiple of 1/65536 and the scale uses the rounded p, so the layer stays unbiased.

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
        self._cut = round(p * 65536)  # drop where a uniform 16-bit draw falls below this
        self._scale = 65536 / (65536 - self._cut)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.training or self._cut == 0:
            return x
        return x * (keep_mask(x.shape, self._cut, x.device).to(x.dtype) * self._scale)  # mul: half the cost of where

    def extra_repr(self) -> str:
        return f"p={self.p}"


def keep_mask(shape: torch.Size, cut: int, device: torch.device) -> torch.Tensor:
    """True with probability 1 - cut/65536, from the global torch generator (so ``manual_seed`` fixes it).

    >>> _ = torch.manual_seed(0)
    >>> round(float(keep_mask(torch.Size([400_000]), 13107, torch.device("cpu")).float().mean()), 2)
    0.8
    """
    n = shape.numel()
    words = torch.empty((n + 3) // 4, dtype=torch.int64, device=device).random_(-(2**63), None)  # all 64 bits
    return words.view(torch.int16)[:n].view(shape) >= cut - 32768  # int16 spans -32768..32767


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


class DeviceError(ValueError):
    """A device that cannot be used here: not a torch device name, or CUDA asked for where there is none."""


def resolve_device(spec: str = "auto") -> torch.device:
    """``auto`` = CUDA when present, else CPU; anything else is passed to torch.device.

    >>> resolve_device("cpu")
    device(type='cpu')
    >>> resolve_device("gpu0")
    Traceback (most recent call last):
    ...
    offline_train.model.DeviceError: invalid device 'gpu0': use auto, cpu, cuda or cuda:N
    >>> resolve_device("meta")
    Traceback (most recent call last):
    ...
    offline_train.model.DeviceError: device 'meta' is not supported: use auto, cpu, cuda or cuda:N
    """
    if spec == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        dev = torch.device(spec)
    except (RuntimeError, ValueError):
        raise DeviceError(f"invalid device {spec!r}: use auto, cpu, cuda or cuda:N") from None
    if dev.type not in ("cpu", "cuda"):  # torch knows mps, meta, xpu...; the scorer and the trainer run on these two
        raise DeviceError(f"device {spec!r} is not supported: use auto, cpu, cuda or cuda:N")
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise DeviceError(f"device {spec!r} requested but CUDA is not available here (torch {torch.__version__}, "
                          f"CUDA build: {torch.version.cuda or 'no'}); use --device cpu or auto")
    if dev.type == "cuda" and dev.index is not None and dev.index >= torch.cuda.device_count():
        raise DeviceError(f"device {spec!r} requested but there are {torch.cuda.device_count()} CUDA device(s)")
    return dev


def auto_precision(device: torch.device) -> str:
    """What ``precision: auto`` trains in: bf16 autocast on a CPU that runs it natively, fp32 on CUDA.

    On the CPU bf16 is the measured speed-up (2.3x the fp32 steps/s on AVX-512 BF16). On CUDA a step of
    these networks (512x6, batches of 128) is bound by kernel launches, not arithmetic, and autocast's
    casts add launches: on an H200 bf16 ran at 0.84x and 0.87x fp32's steps/s with the teacher, in two
    runs of ``kdsm bench train`` (docs/benchmarks.md, "The GPU check again"). ``precision: bf16`` still forces it.

    >>> auto_precision(torch.device("cuda"))
    'fp32'
    """
    if device.type == "cuda":
        return "fp32"
    return "bf16" if bf16_supported(device) else "fp32"


def bf16_supported(device: torch.device) -> bool:
    """Whether bf16 autocast runs natively (AVX-512 BF16/AMX on CPU, Ampere+ on CUDA)."""
    if device.type == "cuda":
        return torch.cuda.is_bf16_supported()
    try:
        return bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
    except (AttributeError, RuntimeError):
        return False
