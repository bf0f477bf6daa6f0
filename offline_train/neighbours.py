"""A k-nearest-neighbour distance to the rows the network keeps, as tensors.

The blend's optional third part (``score.knn``, ``offline_train.blend``): the
distance from a standardised row to the k-th nearest of a seeded sample of the
training rows the trained network finds most normal (the share the refinement
keeps). On contaminated history that set holds few anomalies, so an anomaly
is far from it even where the network and the forest both miss it
(docs/contaminated-passes.md, "Twenty-sixth pass"). The reference rows are stored in
the artifact (safetensors, no pickle): a model trained with this part carries
up to ``score.knn_rows`` standardised training rows.

A row of the reference set is its own nearest neighbour, so the training rows'
distances skip that one (``training_distances``): training and new rows are
then measured alike, which the blend's moments need.

>>> import numpy as np, torch
>>> Z = np.random.default_rng(0).normal(size=(200, 3)).astype(np.float32)
>>> knn = NeighbourScorer.from_rows(Z[:50], k=5)
>>> far = knn(torch.tensor([[0.0, 0.0, 0.0], [9.0, 9.0, 9.0]])).numpy()
>>> bool(far[1] > 10 * far[0])
True
>>> d = knn.training_distances(torch.from_numpy(Z), np.arange(50)).numpy()
>>> from sklearn.neighbors import NearestNeighbors
>>> nn = NearestNeighbors(n_neighbors=6).fit(Z[:50])
>>> exact = np.r_[nn.kneighbors(Z[:50])[0][:, 5], nn.kneighbors(Z[50:], 5)[0][:, 4]]
>>> bool(np.allclose(d, exact, atol=1e-3))
True
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from .artifact import check_counts, check_shapes

_CHUNK = 256  # rows per distance block: 256 x 512 float32 stays in a core's L2 cache


def reference_rows(core: np.ndarray, rows: int, seed: int) -> np.ndarray:
    """At most ``rows`` of the indices ``core``, a seeded sample, sorted.

    >>> reference_rows(np.arange(10), 4, seed=0).tolist() == sorted(reference_rows(np.arange(10), 4, seed=0).tolist())
    True
    >>> reference_rows(np.arange(3), 4, seed=0).tolist()
    [0, 1, 2]
    """
    if len(core) <= rows:
        return np.sort(core)
    return np.sort(np.random.default_rng(seed).choice(core, rows, replace=False))


class NeighbourScorer(nn.Module):
    """Reference rows in a buffer; ``forward(Z)`` is each row's distance to its k-th nearest reference row."""

    def __init__(self, rows: int, d: int, k: int):
        super().__init__()
        self.k = k
        self.register_buffer("reference", torch.zeros((rows, d), dtype=torch.float32))
        self.register_buffer("reference_sq", torch.zeros(rows, dtype=torch.float32))

    @classmethod
    def from_rows(cls, rows: np.ndarray, k: int) -> NeighbourScorer:
        """A scorer over standardised reference ``rows`` (at least 2); k is capped at len(rows) - 1."""
        if len(rows) < 2:
            raise ValueError("a k-NN reference needs at least 2 rows")
        ref = torch.as_tensor(np.asarray(rows), dtype=torch.float32)
        scorer = cls(len(ref), ref.shape[1], min(int(k), len(ref) - 1))
        with torch.no_grad():
            scorer.reference.copy_(ref)
            scorer.reference_sq.copy_((ref * ref).sum(dim=1))
        return scorer

    @property
    def shape(self) -> dict[str, int]:
        """What ``from_state`` needs besides the tensors (the artifact's metadata keeps it)."""
        return {"rows": int(self.reference.shape[0]), "d": int(self.reference.shape[1]), "k": self.k}

    @classmethod
    def from_state(cls, state: dict[str, torch.Tensor], shape: dict[str, int], d: int | None = None) -> NeighbourScorer:
        """Rebuild from ``state_dict()`` tensors and ``shape`` (an artifact); raises on a mismatch, on reference rows
        of a width other than ``d`` (where given) and on non-finite ones.

        ``shape``'s rows and d are checked against the tensors' shapes before the buffers are built (an artifact's
        metadata is a checksummed JSON anyone can re-sign: ``knn.rows`` 10**9 in it would allocate gigabytes of zeros
        before the tensors were compared); RuntimeError, as ``load_state_dict`` raises, names the field.

        >>> a = NeighbourScorer.from_rows(np.zeros((4, 2)), k=2)
        >>> NeighbourScorer.from_state(a.state_dict(), {**a.shape, "rows": 10**9})
        Traceback (most recent call last):
        ...
        RuntimeError: knn.rows = 1000000000 and knn.d = 2 give knn.reference the shape (1000000000, 2); the weights' has (4, 2)
        """
        rows, width = shape["rows"], shape["d"]
        check_counts("knn", rows=rows, d=width)
        if d is not None and width != d:
            raise ValueError(f"k-NN part: reference rows of {width} features for {d}")
        check_shapes(state, {"reference": (rows, width), "reference_sq": (rows,)}, "knn",
                     f"knn.rows = {rows} and knn.d = {width}")
        scorer = cls(rows, width, int(shape["k"]))
        scorer.load_state_dict(state, strict=True)
        if not 1 <= scorer.k < scorer.reference.shape[0]:
            raise ValueError(f"k-NN part: k={scorer.k} for {scorer.reference.shape[0]} reference rows")
        if not (torch.isfinite(scorer.reference).all() and torch.isfinite(scorer.reference_sq).all()):
            raise ValueError("k-NN part: reference rows must be finite")
        return scorer

    def _kth(self, Z: torch.Tensor, ranks: list[int]) -> list[torch.Tensor]:
        """Squared distances of rows Z to their ``ranks``-th nearest reference rows (0-based), one chunk at a time."""
        Z = Z.float()
        out: list[list[torch.Tensor]] = [[] for _ in ranks]
        for i in range(0, len(Z), _CHUNK):
            z = Z[i:i + _CHUNK]
            # ||z - r||^2 = ||z||^2 + ||r||^2 - 2 z.r: one matrix product; the clamp undoes rounding below 0.
            d2 = torch.addmm(self.reference_sq, z, self.reference.T, alpha=-2).add_((z * z).sum(dim=1, keepdim=True))
            d2.clamp_(min=0)
            if d2.is_cuda:
                nearest = d2.topk(max(ranks) + 1, dim=1, largest=False).values  # sorted, nearest first
                for o, r in zip(out, ranks, strict=True):
                    o.append(nearest[:, r])
            else:  # numpy's introselect: several times faster than torch's CPU topk for a few ranks
                part = np.partition(d2.numpy(), ranks, axis=1)
                for o, r in zip(out, ranks, strict=True):
                    o.append(torch.from_numpy(part[:, r].copy()))
        return [torch.cat(o) if o else torch.zeros(0, device=Z.device) for o in out]

    @torch.no_grad()
    def forward(self, Z: torch.Tensor) -> torch.Tensor:
        """Distances of standardised rows ``Z`` (n, d) to their k-th nearest reference row, float64."""
        return self._kth(Z, [self.k - 1])[0].double().sqrt()

    @torch.no_grad()
    def training_distances(self, Z: torch.Tensor, reference_index: np.ndarray) -> torch.Tensor:
        """``forward`` for the training rows ``Z``, those at ``reference_index`` (the reference) skipping themselves."""
        kth, next_ = self._kth(Z, [self.k - 1, self.k])
        in_reference = torch.zeros(len(Z), dtype=torch.bool, device=kth.device)
        in_reference[torch.as_tensor(reference_index, device=kth.device)] = True
        return torch.where(in_reference, next_, kth).double().sqrt()
