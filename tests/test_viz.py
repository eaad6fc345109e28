"""tfscratch.viz: each picture draws the data it was given, labelled, and without warnings."""

import warnings

import matplotlib

matplotlib.use("Agg")  # headless: must precede the pyplot import

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import pytest

from tfscratch import viz
from tfscratch.viz import (
    BLOCKED_COLOUR,
    attention_grid,
    attention_heatmap,
    before_after_histograms,
    log_axis,
    loss_curves,
    pca_2d,
    pca_scatter,
    scaling_plot,
)

# Any warning (RuntimeWarning from -inf, UserWarning from matplotlib, ...) fails the test.
pytestmark = pytest.mark.filterwarnings("error")

TOKENS = ["the", "cat", "sat", "down"]


@pytest.fixture(autouse=True)
def close_figures():
    yield
    plt.close("all")


def softmax_rows(scores):
    shifted = np.exp(scores - scores.max(axis=-1, keepdims=True))
    return shifted / shifted.sum(axis=-1, keepdims=True)


def causal_scores(rng, T):
    scores = rng.normal(size=(T, T))
    scores[np.triu_indices(T, k=1)] = -np.inf  # True-above-diagonal: the future is blocked
    return scores


def tick_texts(labels):
    return [label.get_text() for label in labels]


# --------------------------------------------------------------------------- attention_heatmap


def test_heatmap_image_holds_the_weights(rng):
    weights = softmax_rows(rng.normal(size=(4, 4)))
    ax = attention_heatmap(weights, TOKENS, TOKENS)
    np.testing.assert_array_equal(ax.images[0].get_array(), weights)


def test_heatmap_tick_labels_are_tokens_keys_on_x_queries_on_y():
    query_tokens, key_tokens = ["a", "b"], ["w", "x", "y"]
    ax = attention_heatmap(np.full((2, 3), 1 / 3), query_tokens, key_tokens)
    assert tick_texts(ax.get_xticklabels()) == key_tokens
    assert tick_texts(ax.get_yticklabels()) == query_tokens
    assert ax.get_xlabel() == "key"
    assert ax.get_ylabel() == "query"


def test_heatmap_has_a_colour_bar_and_title(rng):
    ax = attention_heatmap(softmax_rows(rng.normal(size=(3, 3))), title="weights")
    assert ax.images[0].colorbar is not None
    assert ax.get_title() == "weights"
    assert len(ax.figure.axes) == 2  # the heatmap and its colour bar


def test_heatmap_draws_minus_inf_scores_as_blocked_without_warnings(rng):
    scores = causal_scores(rng, 4)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        ax = attention_heatmap(scores, TOKENS, TOKENS, annotate=True)
        ax.figure.canvas.draw()  # rendering is where masked / inf values would warn
    assert caught == []
    drawn = ax.images[0].get_array()
    np.testing.assert_array_equal(drawn.mask, np.isneginf(scores))
    np.testing.assert_array_equal(drawn.compressed(), scores[np.isfinite(scores)])
    # The colour scale spans the finite scores only, and blocked cells get the neutral colour.
    assert ax.images[0].norm.vmin == scores[np.isfinite(scores)].min()
    assert ax.images[0].norm.vmax == scores[np.isfinite(scores)].max()
    np.testing.assert_allclose(
        ax.images[0].cmap.get_bad(), matplotlib.colors.to_rgba(BLOCKED_COLOUR)
    )


def test_heatmap_annotates_values_and_blocked_cells(rng):
    scores = causal_scores(rng, 3)
    ax = attention_heatmap(scores, annotate=True)
    texts = [text.get_text() for text in ax.texts]
    assert texts.count("-∞") == 3
    assert f"{scores[0, 0]:.2f}" in texts


def test_heatmap_does_not_change_the_registered_colormap(rng):
    attention_heatmap(causal_scores(rng, 3), cmap="cividis")
    assert matplotlib.colormaps["cividis"].get_bad()[3] == 0.0  # still transparent


def test_heatmap_draws_on_a_given_axes_and_honours_vmin_vmax():
    _, ax = plt.subplots()
    returned = attention_heatmap(np.eye(3), ax=ax, vmin=0.0, vmax=2.0)
    assert returned is ax
    assert (ax.images[0].norm.vmin, ax.images[0].norm.vmax) == (0.0, 2.0)


def test_heatmap_rejects_labels_of_the_wrong_length():
    with pytest.raises(ValueError, match="key_labels has 2 labels"):
        attention_heatmap(np.eye(3), key_labels=["a", "b"])


def test_heatmap_rejects_a_stack_of_heads():
    with pytest.raises(ValueError, match="attention_grid"):
        attention_heatmap(np.ones((2, 3, 3)))


# --------------------------------------------------------------------------- attention_grid


def test_grid_has_one_panel_per_head_each_holding_its_weights(rng):
    weights = softmax_rows(rng.normal(size=(6, 4, 4)))
    fig = attention_grid(weights, TOKENS, TOKENS, ncols=4, suptitle="6 heads")
    head_axes = [ax for ax in fig.axes if ax.images]
    assert len(head_axes) == 6
    for head, ax in enumerate(head_axes):
        np.testing.assert_array_equal(ax.images[0].get_array(), weights[head])
        assert ax.get_title() == f"head {head}"
        assert tick_texts(ax.get_xticklabels()) == TOKENS
    assert len(fig.axes) == 7  # 6 heads + 1 shared colour bar; the 2 unused cells removed
    assert fig.get_suptitle() == "6 heads"


def test_grid_heads_share_one_colour_scale(rng):
    weights = softmax_rows(rng.normal(size=(3, 4, 4)) * np.array([1.0, 3.0, 10.0])[:, None, None])
    fig = attention_grid(weights, titles=["a", "b", "c"])
    limits = {(ax.images[0].norm.vmin, ax.images[0].norm.vmax) for ax in fig.axes if ax.images}
    assert limits == {(weights.min(), weights.max())}
    assert [ax.get_title() for ax in fig.axes if ax.images] == ["a", "b", "c"]


def test_grid_draws_masked_scores_without_warnings(rng):
    scores = np.stack([causal_scores(rng, 4) for _ in range(2)])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        fig = attention_grid(scores)
        fig.canvas.draw()
    assert caught == []


def test_grid_rejects_a_batch_dimension():
    with pytest.raises(ValueError, match=r"weights\[0\]"):
        attention_grid(np.ones((1, 2, 3, 3)))


# --------------------------------------------------------------------------- PCA


def test_pca_recovers_a_plane_hidden_in_higher_dimensions(rng):
    plane_coords = rng.normal(size=(50, 2)) * np.array([5.0, 1.0])  # a wide, flat cloud
    embedding, _ = np.linalg.qr(rng.normal(size=(8, 2)))  # orthonormal (8, 2)
    X = plane_coords @ embedding.T + 3.0  # the offset must not matter
    coords, explained = pca_2d(X)
    assert coords.shape == (50, 2)
    # Exactly two dimensions carry variance, so two components explain all of it.
    assert explained.sum() == pytest.approx(1.0)
    assert explained[0] > explained[1]
    # Same point-to-point geometry as the hidden plane (PCA is a rotation of it).
    centred = plane_coords - plane_coords.mean(axis=0)
    np.testing.assert_allclose(coords @ coords.T, centred @ centred.T, atol=1e-8)


def test_pca_explained_variance_is_at_most_one(rng):
    _, explained = pca_2d(rng.normal(size=(20, 6)), n_components=3)
    assert explained.shape == (3,)
    assert np.all(explained >= 0)
    assert explained.sum() <= 1.0
    assert np.all(np.diff(explained) <= 0)  # sorted, largest first


def test_pca_sign_convention_is_stable_under_flipping_the_data(rng):
    X = rng.normal(size=(30, 5)) * np.array([4.0, 2.0, 1.0, 0.5, 0.1])
    coords, _ = pca_2d(X)
    flipped_coords, _ = pca_2d(-X)
    # The components are fixed by the data's spread, not by the SVD's arbitrary sign.
    np.testing.assert_allclose(np.abs(coords), np.abs(flipped_coords), atol=1e-10)
    np.testing.assert_allclose(pca_2d(X)[0], coords)
    centred = X - X.mean(axis=0)
    components = np.linalg.lstsq(centred, coords, rcond=None)[0].T  # (2, D)
    largest = np.argmax(np.abs(components), axis=1)
    assert np.all(components[[0, 1], largest] > 0)


def test_pca_rejects_too_many_components():
    with pytest.raises(ValueError, match="min"):
        pca_2d(np.ones((3, 2)), n_components=3)


def test_pca_scatter_labels_every_point(rng):
    X = rng.normal(size=(4, 6))
    ax = pca_scatter(X, TOKENS, title="embeddings")
    np.testing.assert_allclose(ax.collections[0].get_offsets(), pca_2d(X)[0])
    assert [text.get_text() for text in ax.texts] == TOKENS
    assert ax.get_xlabel().startswith("PC1")
    assert ax.get_title() == "embeddings"


# --------------------------------------------------------------------------- histograms


def test_before_after_histograms_count_every_value(rng):
    before = rng.normal(3.0, 5.0, size=(10, 20))
    after = (before - before.mean()) / before.std()
    fig = before_after_histograms(before, after, labels=("raw", "normalised"), bins=10)
    assert len(fig.axes) == 2
    for ax, label in zip(fig.axes, ("raw", "normalised"), strict=True):
        counts = [patch.get_height() for patch in ax.patches]
        assert len(counts) == 10
        assert sum(counts) == 200
        assert ax.get_title().startswith(label)
    assert "std 1.00" in fig.axes[1].get_title()


# --------------------------------------------------------------------------- scaling and loss


def test_scaling_plot_legend_reports_the_fitted_slope():
    sizes = np.array([16, 32, 64, 128])
    ax = scaling_plot(sizes, 2e-8 * sizes**2.0, label="attention", xlabel="T")
    legend = [text.get_text() for text in ax.get_legend().get_texts()]
    assert legend == ["attention, slope 2.00", "reference, slope 2"]
    assert ax.get_xscale() == ax.get_yscale() == "log"
    assert ax.get_xlabel() == "T (log scale)"
    measured, reference = ax.get_lines()
    np.testing.assert_array_equal(measured.get_xdata(), sizes)
    assert reference.get_linestyle() == "--"


def test_scaling_plot_reference_line_has_the_reference_slope():
    sizes = np.array([10.0, 100.0, 1000.0])
    ax = scaling_plot(sizes, 1e-5 * sizes, reference_exponent=2)
    reference = ax.get_lines()[1]
    x, y = reference.get_xdata(), reference.get_ydata()
    assert np.polyfit(np.log(x), np.log(y), 1)[0] == pytest.approx(2.0)
    assert "slope 1.00" in ax.get_legend().get_texts()[0].get_text()


def test_scaling_plot_fit_last_and_no_reference():
    sizes = np.array([1, 2, 4, 64, 128, 256])
    ax = scaling_plot(sizes, np.maximum(1000.0, sizes**2.0), fit_last=3, reference_exponent=None)
    assert len(ax.get_lines()) == 1
    assert ax.get_legend().get_texts()[0].get_text() == "measured, slope 2.00"


def test_loss_curves_draw_train_val_and_baselines():
    history = pd.DataFrame(
        {
            "step": [0, 10, 20, 30],
            "train_loss": [3.3, 2.6, 2.2, 2.0],
            "val_loss": [3.3, np.nan, np.nan, 2.1],  # validation every 30 steps only
        }
    )
    ax = loss_curves(history, baselines={"uniform": np.log(27), "bigram": 2.45}, title="LM")
    train, validation, uniform, bigram = ax.get_lines()
    np.testing.assert_array_equal(train.get_ydata(), history["train_loss"])
    np.testing.assert_array_equal(validation.get_xdata(), [0, 30])
    np.testing.assert_array_equal(validation.get_ydata(), [3.3, 2.1])
    assert list(bigram.get_ydata()) == [2.45, 2.45]
    assert uniform.get_linestyle() == bigram.get_linestyle() == "--"
    legend = [text.get_text() for text in ax.get_legend().get_texts()]
    assert legend == ["train", "validation", "uniform (3.30)", "bigram (2.45)"]


def test_loss_curves_without_validation_column():
    history = pd.DataFrame({"step": [0, 1, 2], "train_loss": [2.0, 1.5, 1.2]})
    ax = loss_curves(history)
    assert len(ax.get_lines()) == 1


def test_loss_curves_name_the_missing_column():
    with pytest.raises(ValueError, match="train_loss"):
        loss_curves(pd.DataFrame({"step": [0, 1]}))


# --------------------------------------------------------------------------- every figure is labelled

NOT_FIGURES = {"pca_2d", "log_axis"}  # a computation and an axis helper, tested on their own


def _figure_examples():
    """Each public figure function of tfscratch.viz, called as the notebooks call it."""
    rng = np.random.default_rng(0)
    history = pd.DataFrame(
        {"step": [0, 10, 20], "train_loss": [3.0, 1.0, 0.2], "val_loss": [3.0, np.nan, 0.3]}
    )
    sizes = np.array([64, 128, 256, 512])
    return {
        "attention_heatmap": lambda: attention_heatmap(softmax_rows(rng.normal(size=(4, 4)))),
        "attention_heatmap (scores)": lambda: attention_heatmap(
            causal_scores(rng, 4), TOKENS, TOKENS
        ),
        "attention_grid": lambda: attention_grid(softmax_rows(rng.normal(size=(6, 4, 4))), ncols=4),
        "before_after_histograms": lambda: before_after_histograms(
            rng.normal(size=50), rng.normal(size=50)
        ),
        "pca_scatter": lambda: pca_scatter(rng.normal(size=(4, 6)), TOKENS),
        "scaling_plot": lambda: scaling_plot(sizes, 3e-7 * sizes**2.0, xlabel="sequence length T"),
        "loss_curves": lambda: loss_curves(history, baselines={"uniform": np.log(27)}),
        "loss_curves (log scale)": lambda: loss_curves(history, log_scale=True),
    }


def _figure_of(drawn):
    return drawn if isinstance(drawn, matplotlib.figure.Figure) else drawn.figure


def test_every_figure_function_has_an_example_here():
    figure_functions = set(viz.__all__) - NOT_FIGURES
    covered = {name.split(" ")[0] for name in _figure_examples()}
    assert figure_functions == covered, "a new tfscratch.viz figure function needs an example above"


@pytest.mark.parametrize("name", list(_figure_examples()))
def test_every_figure_labels_its_axes_colour_bars_and_log_scales(name):
    fig = _figure_of(_figure_examples()[name]())
    fig.canvas.draw()  # tick labels exist only once drawn
    colorbar_axes = {image.colorbar.ax for ax in fig.axes for image in ax.images if image.colorbar}
    panels = [ax for ax in fig.axes if ax not in colorbar_axes]
    assert panels
    for ax in panels:
        spec = ax.get_subplotspec()
        # A grid names its axes on the outer panels only (left column, bottom panel of a column).
        column_below = [
            other
            for other in panels
            if other.get_subplotspec().colspan.start == spec.colspan.start
            and other.get_subplotspec().rowspan.start > spec.rowspan.start
        ]
        if not column_below:
            assert ax.get_xlabel().strip(), f"{name}: a panel has no x label"
        if spec.colspan.start == 0:
            assert ax.get_ylabel().strip(), f"{name}: a panel has no y label"
        for axis, label in ((ax.xaxis, ax.get_xlabel()), (ax.yaxis, ax.get_ylabel())):
            if axis.get_scale() == "log":
                assert "(log scale)" in label, f"{name}: log axis labelled {label!r}"
                ticks = [text.get_text() for text in axis.get_ticklabels() if text.get_text()]
                assert ticks, f"{name}: a log axis without tick labels"
                for tick in ticks:
                    float(tick)  # a plain number: no 10^k, no mathtext
    for cax in colorbar_axes:
        label = cax.get_ylabel() or cax.get_xlabel()
        assert label.strip(), f"{name}: a colour bar without a label"


def test_heatmap_colour_bar_says_what_the_colours_are(rng):
    weights_ax = attention_heatmap(softmax_rows(rng.normal(size=(3, 3))))
    scores_ax = attention_heatmap(causal_scores(rng, 3))
    named_ax = attention_heatmap(
        causal_scores(rng, 3), colorbar_label="score $q \\cdot k / \\sqrt{d}$"
    )
    assert weights_ax.images[0].colorbar.ax.get_ylabel() == "attention weight"
    assert scores_ax.images[0].colorbar.ax.get_ylabel() == "value"
    assert named_ax.images[0].colorbar.ax.get_ylabel().startswith("score")
    fig = attention_grid(np.ones((2, 3, 3)) / 3, colorbar_label="weight")
    assert fig.axes[-1].get_ylabel() == "weight"


def test_log_axis_plain_ticks_and_label_said_once():
    _, ax = plt.subplots()
    ax.plot([1, 2, 3], [0.02, 0.3, 4.0])
    ax.set_ylabel("time (ms)")
    log_axis(ax, "y")
    log_axis(ax, "y")  # idempotent
    ax.figure.canvas.draw()
    assert ax.get_yscale() == "log"
    assert ax.get_ylabel() == "time (ms) (log scale)"
    ticks = [text.get_text() for text in ax.get_yticklabels() if text.get_text()]
    assert {"0.02", "0.05", "0.1", "0.2", "0.5", "1", "2"} <= set(ticks), ticks
    with pytest.raises(ValueError, match="'x' or 'y'"):
        log_axis(ax, "z")


def test_loss_curves_name_nats_and_scaling_plot_says_log_scale():
    ax = loss_curves(pd.DataFrame({"step": [0, 1], "train_loss": [2.0, 1.0]}))
    assert ax.get_ylabel() == "cross-entropy loss (nats)"
    sizes = np.array([16, 32, 64])
    ax = scaling_plot(sizes, 1e-6 * sizes**2.0, xlabel="T")
    assert ax.get_xlabel() == "T (log scale)" and ax.get_ylabel() == "time (s) (log scale)"
    assert [text.get_text() for text in ax.get_xticklabels()] == ["16", "32", "64"]
