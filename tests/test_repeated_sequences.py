"""tfscratch.data.repeated_random_tokens: random sequences written twice (notebook 15)."""

import numpy as np
import pytest

from tfscratch.data import repeated_random_tokens


def test_shape_dtype_and_the_second_copy_equals_the_first():
    tokens = repeated_random_tokens(5, 7, 11, seed=3)
    assert tokens.shape == (5, 14) and tokens.dtype == np.int64
    np.testing.assert_array_equal(tokens[:, :7], tokens[:, 7:])
    assert tokens.min() >= 0 and tokens.max() < 11


def test_bos_goes_first_and_is_never_drawn():
    tokens = repeated_random_tokens(400, 10, 5, seed=0, bos=2)
    assert tokens.shape == (400, 21)
    assert np.all(tokens[:, 0] == 2) and not np.any(tokens[:, 1:] == 2)
    np.testing.assert_array_equal(tokens[:, 1:11], tokens[:, 11:])
    assert set(np.unique(tokens[:, 1:])) == {0, 1, 3, 4}  # every other id is drawn


def test_draws_are_uniform_and_seeded():
    tokens = repeated_random_tokens(2000, 10, 4, seed=1)
    counts = np.bincount(tokens[:, :10].ravel(), minlength=4) / 20000
    np.testing.assert_allclose(counts, 0.25, atol=0.02)
    np.testing.assert_array_equal(tokens, repeated_random_tokens(2000, 10, 4, seed=1))
    assert not np.array_equal(tokens, repeated_random_tokens(2000, 10, 4, seed=2))


@pytest.mark.parametrize(
    "kwargs, argument",
    [
        (dict(n=0, seq_len=3, vocab_size=5), "n="),
        (dict(n=2, seq_len=0, vocab_size=5), "seq_len="),
        (dict(n=2, seq_len=3, vocab_size=1), "vocab_size="),
        (dict(n=2, seq_len=3, vocab_size=5, bos=5), "bos=5"),
        (dict(n=2, seq_len=3, vocab_size=5, bos=-1), "bos="),
        (dict(n=2, seq_len=3, vocab_size=2, bos=0), "vocab_size="),
        (dict(n=2, seq_len=3, vocab_size=5, seed=-1), "seed="),
    ],
)
def test_bad_input_names_the_argument(kwargs, argument):
    with pytest.raises(ValueError, match=argument):
        repeated_random_tokens(**kwargs)


def test_wrong_types_are_type_errors():
    with pytest.raises(TypeError, match="seq_len"):
        repeated_random_tokens(2, 3.5, 5)
