"""Baselines: the losses a language model has to beat to have learnt anything.

* ``uniform_loss``: a model that knows nothing spreads its probability evenly, so its loss
  is ``ln V`` whatever the data.
* ``BigramModel``: a model that only looks at the previous token, fitted by counting
  (previous, next) pairs. No gradients, trained in milliseconds; a Transformer that cannot
  beat it has not learnt to use its context.

Losses are mean negative log-likelihoods in nats (natural log), like ``cross_entropy``.
"""

from __future__ import annotations

import math

import numpy as np

from .checks import check_positive_int, check_seed, check_token_id, check_token_ids
from .functional import IGNORE_INDEX

__all__ = ["BigramModel", "uniform_loss"]


def uniform_loss(vocab_size: int) -> float:
    """Loss of the uniform guess over ``vocab_size`` classes: ``ln(vocab_size)`` nats.

    Count the classes the model can actually put probability on. A ``DecoderLM`` whose
    output layer has one logit per token of a 30-token vocabulary is measured against
    ``uniform_loss(30)``, even though ``<pad>`` and ``<bos>`` never appear as targets;
    a model that knew from the start that only the 26 letters and ``<eos>`` are possible
    would be measured against ``uniform_loss(27)``.

    Args:
        vocab_size: the number of classes, an int >= 1.

    Returns:
        float, e.g. ``uniform_loss(27) == 3.2958...``.
    """
    if isinstance(vocab_size, bool) or not isinstance(vocab_size, (int, np.integer)):
        raise TypeError(
            f"vocab_size must be an int, got {type(vocab_size).__name__} {vocab_size!r}"
        )
    if vocab_size < 1:
        raise ValueError(f"vocab_size={vocab_size} must be at least 1")
    return math.log(vocab_size)


def _aligned_pairs(X, Y, vocab_size: int) -> tuple[np.ndarray, np.ndarray]:
    """The (previous, next) token pairs of aligned inputs and targets, ignored targets dropped."""
    X = check_token_ids(np.asarray(X), "X", vocab_size).astype(np.int64)
    Y = check_token_ids(np.asarray(Y), "Y", vocab_size, ignore_index=IGNORE_INDEX).astype(np.int64)
    if X.shape != Y.shape:
        raise ValueError(f"X and Y must have the same shape, got X {X.shape} and Y {Y.shape}")
    # In lm_examples' layout Y[b, t] is the token that follows X[b, t], so the pairs are
    # simply the two arrays read side by side where the target counts.
    kept = Y != IGNORE_INDEX
    return X[kept], Y[kept]


class BigramModel:
    """P(next token | previous token), estimated by counting.

    Attributes:
        counts: int64 ``(V, V)``; ``counts[a, b]`` = how often token b followed token a.
        smoothing: pseudo-count added to every cell before normalising (add-k / Laplace), so
            a pair never seen in training still gets a little probability instead of an
            infinite loss.
        probs: float64 ``(V, V)``; row ``a`` is the distribution of the token after ``a``
            (each row sums to 1). A row that has no counts and no smoothing is uniform.

    Args:
        counts: the ``(V, V)`` table of counts (``BigramModel.fit`` counts them from data).
        smoothing: the pseudo-count, >= 0.
    """

    def __init__(self, counts: np.ndarray, smoothing: float = 1.0):
        counts = np.asarray(counts)
        if counts.ndim != 2 or counts.shape[0] != counts.shape[1] or counts.shape[0] < 1:
            raise ValueError(f"counts must be a square (V, V) array, got shape {counts.shape}")
        if not np.issubdtype(counts.dtype, np.number) or (counts < 0).any():
            raise ValueError("counts must hold non-negative numbers")
        if not isinstance(smoothing, (int, float, np.number)) or not smoothing >= 0:
            raise ValueError(f"smoothing={smoothing!r} must be a number >= 0")
        self.counts = counts
        self.smoothing = float(smoothing)
        self.vocab_size = counts.shape[0]
        smoothed = counts.astype(np.float64) + self.smoothing
        row_totals = smoothed.sum(axis=1, keepdims=True)
        # A token never seen as "previous" (and no smoothing) has no evidence at all:
        # the honest answer is the uniform distribution, not 0/0.
        uniform = np.full_like(smoothed, 1.0 / self.vocab_size)
        with np.errstate(invalid="ignore", divide="ignore"):
            self.probs = np.where(row_totals > 0, smoothed / row_totals, uniform)

    @classmethod
    def fit(cls, X, Y, vocab_size: int, smoothing: float = 1.0) -> BigramModel:
        """Count the (X[b, t], Y[b, t]) pairs of aligned input/target arrays.

        Args:
            X: int ``(N, T)`` (any shape) inputs, e.g. from ``lm_examples``.
            Y: int, same shape: the token after each input, ``IGNORE_INDEX`` where none.
            vocab_size: V.
            smoothing: pseudo-count added to every (previous, next) cell.
        """
        if isinstance(vocab_size, bool) or not isinstance(vocab_size, (int, np.integer)):
            raise TypeError(f"vocab_size must be an int, got {vocab_size!r}")
        if vocab_size < 1:
            raise ValueError(f"vocab_size={vocab_size} must be at least 1")
        previous, following = _aligned_pairs(X, Y, vocab_size)
        # One bincount over the flattened cell index a * V + b counts every pair at once.
        flat = np.bincount(previous * vocab_size + following, minlength=vocab_size * vocab_size)
        return cls(flat.reshape(vocab_size, vocab_size).astype(np.int64), smoothing)

    def loss(self, X, Y) -> float:
        """Mean negative log-likelihood (nats) of the non-ignored targets of ``Y`` given ``X``.

        0.0 when every target is ignored (as ``cross_entropy``).

        Args:
            X: int ``(B, T)`` inputs; Y: int ``(B, T)`` targets (``IGNORE_INDEX`` where none).

        Returns:
            the mean loss in nats, a Python float.
        """
        previous, following = _aligned_pairs(X, Y, self.vocab_size)
        if previous.size == 0:
            return 0.0
        with np.errstate(divide="ignore"):  # a zero probability is an infinite loss, honestly
            return float(-np.log(self.probs[previous, following]).mean())

    def sample(
        self,
        n_samples: int,
        start_id: int,
        stop_id: int | None = None,
        max_new_tokens: int = 20,
        seed: int | None = None,
    ) -> list[list[int]]:
        """Draw sequences token by token from the bigram distribution.

        Args:
            n_samples: how many sequences.
            start_id: the first "previous" token (usually ``<bos>``); not part of the result.
            stop_id: a sequence ends when it draws this token (usually ``<eos>``).
            max_new_tokens: the longest a sequence may grow.
            seed: seed of the draw.

        Returns:
            ``n_samples`` lists of new token ids, each ending with ``stop_id`` when it was
            drawn (as ``tfscratch.generate``).
        """
        n_samples = check_positive_int(n_samples, "n_samples")
        max_new_tokens = check_positive_int(max_new_tokens, "max_new_tokens")
        for value, name in ((start_id, "start_id"), (stop_id, "stop_id")):
            if value is not None:
                check_token_id(value, name, self.vocab_size)
        rng = np.random.default_rng(check_seed(seed))
        cumulative = np.cumsum(self.probs, axis=1)
        tokens = np.empty((n_samples, max_new_tokens), dtype=np.int64)
        current = np.full(n_samples, start_id, dtype=np.int64)
        # One step draws the next token of every sample at once (inverse-CDF sampling:
        # the first cumulative probability above a uniform number); only the steps loop.
        for step in range(max_new_tokens):
            u = rng.random(n_samples)[:, None] * cumulative[current, -1:]
            current = np.minimum((cumulative[current] <= u).sum(axis=1), self.vocab_size - 1)
            tokens[:, step] = current
        samples = []
        for row in tokens.tolist():
            if stop_id is not None and stop_id in row:
                row = row[: row.index(stop_id) + 1]
            samples.append(row)
        return samples

    def __repr__(self) -> str:
        return (
            f"BigramModel(vocab_size={self.vocab_size}, smoothing={self.smoothing}, "
            f"pairs counted={int(self.counts.sum())})"
        )
