"""Shared fixtures: float64 everywhere a gradient is checked."""

import numpy as np
import pytest

GRAD_TOL = 1e-6  # the project's bar for every backward pass (float64, central differences)


@pytest.fixture
def rng():
    return np.random.default_rng(1234)
