"""Shared fixtures: float64 everywhere a gradient is checked; ``expect`` for error messages."""

import re

import numpy as np
import pytest

GRAD_TOL = 1e-6  # the project's bar for every backward pass (float64, central differences)


@pytest.fixture
def rng():
    return np.random.default_rng(1234)


def randomize(module, seed=0, std=0.5):
    """Give every parameter (LayerNorm gains and biases too) well-scaled random values.

    The models start with GPT-2's small N(0, 0.02) weights, where attention scores are
    nearly flat and the query/key gradients are ~1e-8: finite differences then measure
    round-off, not the backward. A gradient check wants gradients of order one.
    """
    rng = np.random.default_rng(seed)
    for parameter in module.parameters():
        parameter.data[...] = rng.normal(0.0, std, parameter.shape)
    return module


def expect(*facts):
    """A ``pytest.raises(match=...)`` pattern that requires every fact, literally and in any
    order: the argument, the value given, what was expected. The wording around them is
    free, so a clearer sentence never breaks a test; a message that drops a fact does."""
    return "(?s)^" + "".join(f"(?=.*{re.escape(str(fact))})" for fact in facts)
