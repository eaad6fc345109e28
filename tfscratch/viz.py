"""Pictures for the course: attention heatmaps, PCA of embeddings, histograms, scaling and loss.

The presentation layer: nothing in the numerical core imports this module, so the core stays
free of matplotlib. Every drawing function accepts an optional ``ax=`` (or builds its own
figure) and returns the Axes or Figure it drew on, so a notebook can keep decorating it and a
test can read back what was drawn (``ax.images[0].get_array()``, tick labels, legend texts).

Colour maps default to ``"viridis"``, which is perceptually uniform and readable with the
common forms of colour blindness; ``"cividis"`` is a good alternative.

Every figure names what its axes and colour bars measure (with the unit where there is one),
and a logarithmic axis says "(log scale)" in its label and writes its ticks as plain numbers
(0.5, 1, 2, 5, not 5x10^-1): see :func:`log_axis`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import matplotlib
import matplotlib.pyplot as plt
import numpy as np
from matplotlib.ticker import FuncFormatter, LogLocator, MaxNLocator, NullFormatter

from .timing import fit_loglog

__all__ = [
    "attention_grid",
    "attention_heatmap",
    "before_after_histograms",
    "log_axis",
    "loss_curves",
    "pca_2d",
    "pca_scatter",
    "scaling_plot",
]

# Masked (blocked) attention cells: a light grey that is in none of viridis/cividis's colours,
# so a learner never mistakes "blocked" for "weight 0" (dark purple).
BLOCKED_COLOUR = "#d9d9d9"

# Baseline lines in Okabe-Ito colours, told apart with any colour vision and from the train
# (blue, C0) and validation (orange, C1) curves; matplotlib's C2/C3 are a green/red pair.
BASELINE_COLOURS = ("#009E73", "#CC79A7", "#000000", "#56B4E9", "#D55E00")


# --------------------------------------------------------------------------- attention


def attention_heatmap(
    weights,
    query_labels: Sequence[str] | None = None,
    key_labels: Sequence[str] | None = None,
    ax=None,
    title: str | None = None,
    cmap="viridis",
    vmin: float | None = None,
    vmax: float | None = None,
    annotate: bool = False,
    colorbar_label: str | None = None,
):
    """Draw one attention matrix: row ``i`` is query ``i``, column ``j`` is key ``j``.

    Works for weights (after softmax) and for raw or masked scores: entries that are ``-inf``
    (or NaN, or masked in a ``numpy.ma`` array) are blocked and drawn in a neutral grey, not
    on the colour scale, and the colour scale is fitted to the finite entries only.

    Args:
        weights: ``(T_q, T_k)`` array, or a ``numpy.ma.MaskedArray`` of that shape.
        query_labels: ``T_q`` tokens for the y axis; ``None`` shows positions.
        key_labels: ``T_k`` tokens for the x axis; ``None`` shows positions.
        ax: Axes to draw on; ``None`` makes a new figure.
        title: Axes title.
        cmap: a matplotlib colormap name or object.
        vmin, vmax: colour-scale limits; ``None`` uses the finite min / max.
        annotate: write each value in its cell (``-inf`` cells read "-∞").
        colorbar_label: what the colours measure; ``None`` says "attention weight" when
            every finite entry lies in [0, 1] (weights after softmax) and "value" otherwise
            (scores, outputs: pass a better name).

    Returns:
        The Axes. Its image is ``ax.images[0]`` (data ``ax.images[0].get_array()``, a masked
        array), and the colour bar is ``ax.images[0].colorbar``.
    """
    values = _as_masked_matrix(weights, "weights")
    if ax is None:
        _, ax = plt.subplots(figsize=_heatmap_figsize(values.shape), layout="constrained")
    image = _draw_heatmap(
        ax, values, query_labels, key_labels, cmap=cmap, vmin=vmin, vmax=vmax, annotate=annotate
    )
    ax.figure.colorbar(image, ax=ax, label=_colorbar_label(values, colorbar_label))
    if title is not None:
        ax.set_title(title)
    return ax


def attention_grid(
    weights,
    query_labels: Sequence[str] | None = None,
    key_labels: Sequence[str] | None = None,
    titles: Sequence[str] | None = None,
    ncols: int = 4,
    suptitle: str | None = None,
    cmap="viridis",
    vmin: float | None = None,
    vmax: float | None = None,
    colorbar_label: str | None = None,
):
    """Draw every head's attention matrix side by side, on one shared colour scale.

    A shared scale is what makes heads comparable: the same colour means the same weight in
    every panel, and there is one colour bar for the whole figure.

    Args:
        weights: ``(H, T_q, T_k)``, e.g. ``attn_weights[0]`` of a ``(B, H, T_q, T_k)`` batch.
        query_labels, key_labels: tokens for the y / x axes (shared by all heads).
        titles: ``H`` panel titles; default ``"head 0"``, ``"head 1"``, ...
        ncols: panels per row (fewer if ``H`` is smaller).
        suptitle: figure title.
        cmap, vmin, vmax: as in :func:`attention_heatmap`; limits default to the finite
            min / max over all heads.
        colorbar_label: as in :func:`attention_heatmap`.

    Returns:
        The Figure; ``fig.axes[:H]`` are the heads, the last axes is the colour bar.
    """
    values = np.ma.masked_invalid(np.ma.asarray(weights, dtype=np.float64))
    if values.ndim != 3:
        hint = " (pick one batch element: weights[0])" if values.ndim == 4 else ""
        raise ValueError(f"weights must be (H, T_q, T_k), got shape {values.shape}{hint}")
    n_heads = values.shape[0]
    if titles is not None and len(titles) != n_heads:
        raise ValueError(f"got {len(titles)} titles for {n_heads} heads")
    ncols = max(1, min(int(ncols), n_heads))
    nrows = -(-n_heads // ncols)  # ceiling division
    panel_width, panel_height = _heatmap_figsize(values.shape[1:])
    fig, axes = plt.subplots(
        nrows,
        ncols,
        figsize=(panel_width * ncols * 0.85 + 0.8, panel_height * nrows),
        squeeze=False,
        layout="constrained",
    )
    # One scale for all heads, fitted to the finite entries of all heads together.
    vmin, vmax = _colour_limits(values, vmin, vmax)
    flat_axes = axes.ravel()
    for head, ax in enumerate(flat_axes[:n_heads]):
        image = _draw_heatmap(
            ax, values[head], query_labels, key_labels, cmap=cmap, vmin=vmin, vmax=vmax
        )
        ax.set_title(titles[head] if titles is not None else f"head {head}")
        # Axis names only on the outer panels: the inner ones would repeat them H times.
        if head % ncols != 0:
            ax.set_ylabel("")
        if head + ncols < n_heads:
            ax.set_xlabel("")
    for unused in flat_axes[n_heads:]:
        unused.remove()
    fig.colorbar(
        image, ax=flat_axes[:n_heads].tolist(), label=_colorbar_label(values, colorbar_label)
    )
    if suptitle is not None:
        fig.suptitle(suptitle)
    return fig


def _as_masked_matrix(weights, name: str) -> np.ma.MaskedArray:
    """``(T_q, T_k)`` float64 masked array with every non-finite entry masked."""
    # masked_invalid keeps an existing mask and adds NaN / +-inf to it; matplotlib then
    # draws those cells with the colormap's "bad" colour instead of warning about them.
    values = np.ma.masked_invalid(np.ma.asarray(weights, dtype=np.float64))
    if values.ndim != 2:
        hint = " (for several heads use attention_grid)" if values.ndim == 3 else ""
        raise ValueError(f"{name} must be (T_q, T_k), got shape {values.shape}{hint}")
    return values


def _colorbar_label(values: np.ma.MaskedArray, label: str | None) -> str:
    if label is not None:
        return label
    finite = values.compressed()
    is_weights = finite.size > 0 and finite.min() >= 0.0 and finite.max() <= 1.0
    return "attention weight" if is_weights else "value"


def _colour_limits(values: np.ma.MaskedArray, vmin, vmax) -> tuple[float, float]:
    finite = values.compressed()
    if finite.size == 0:  # everything blocked: any scale will do, avoid NaN limits
        finite = np.array([0.0, 1.0])
    vmin = float(finite.min()) if vmin is None else float(vmin)
    vmax = float(finite.max()) if vmax is None else float(vmax)
    return vmin, vmax


def _heatmap_figsize(shape) -> tuple[float, float]:
    n_queries, n_keys = shape
    # About 0.45 inch per token, within limits a notebook page can show.
    return (min(max(3.0 + 0.45 * n_keys, 4.0), 12.0), min(max(2.0 + 0.45 * n_queries, 3.0), 10.0))


def _check_labels(labels, length: int, name: str, axis_name: str) -> list[str] | None:
    if labels is None:
        return None
    labels = [str(label) for label in labels]
    if len(labels) != length:
        raise ValueError(
            f"{name} has {len(labels)} labels but the matrix has {length} {axis_name}; "
            "pass one token per row (queries) / column (keys)"
        )
    return labels


def _draw_heatmap(ax, values, query_labels, key_labels, cmap, vmin=None, vmax=None, annotate=False):
    """Draw the ``(T_q, T_k)`` masked array on ``ax`` (no colour bar); return the image."""
    n_queries, n_keys = values.shape
    query_labels = _check_labels(query_labels, n_queries, "query_labels", "rows (queries)")
    key_labels = _check_labels(key_labels, n_keys, "key_labels", "columns (keys)")
    vmin, vmax = _colour_limits(values, vmin, vmax)
    # A copy of the colormap with a neutral "bad" colour; never modify the registered one.
    colormap = matplotlib.colormaps.get_cmap(cmap).with_extremes(bad=BLOCKED_COLOUR)
    image = ax.imshow(
        values, cmap=colormap, vmin=vmin, vmax=vmax, aspect="auto", interpolation="nearest"
    )
    ax.set_xlabel("key")
    ax.set_ylabel("query")
    if key_labels is not None:
        ax.set_xticks(np.arange(n_keys), labels=key_labels)
        if max((len(label) for label in key_labels), default=0) > 2:
            ax.tick_params(axis="x", labelrotation=90)
    else:
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    if query_labels is not None:
        ax.set_yticks(np.arange(n_queries), labels=query_labels)
    else:
        ax.yaxis.set_major_locator(MaxNLocator(integer=True))
    if annotate:
        _annotate_cells(ax, values, image)
    return image


def _annotate_cells(ax, values: np.ma.MaskedArray, image) -> None:
    raw = values.data
    colours = image.norm(values)  # position of each value on the colour scale, 0..1
    for row in range(values.shape[0]):
        for column in range(values.shape[1]):
            if values.mask is not np.ma.nomask and values.mask[row, column]:
                text, colour = ("-∞" if raw[row, column] == -np.inf else ""), "black"
            else:
                text = f"{raw[row, column]:.2f}"
                # viridis / cividis are dark at the low end, light at the high end.
                colour = "black" if colours[row, column] > 0.6 else "white"
            if text:
                ax.text(column, row, text, ha="center", va="center", fontsize=8, color=colour)


# --------------------------------------------------------------------------- PCA


def pca_2d(X, n_components: int = 2) -> tuple[np.ndarray, np.ndarray]:
    """Project points onto their top principal components (pure NumPy: centre, then SVD).

    The rows of ``Vt`` in ``X_centred = U S Vt`` are the directions of largest variance; the
    coordinates are ``X_centred @ Vt[:k].T``. An SVD fixes each direction only up to sign, so
    each component is flipped to make its largest-magnitude entry positive: the same data
    then always gives the same picture, on any machine.

    Args:
        X: ``(N, D)`` points, e.g. one embedding per row.
        n_components: ``k <= min(N, D)``.

    Returns:
        ``(coords, explained_variance_ratio)``: ``(N, k)`` float64 coordinates and ``(k,)``
        the fraction of the total variance each component explains (sums to <= 1).
    """
    X = np.asarray(X, dtype=np.float64)
    if X.ndim != 2:
        raise ValueError(f"X must be (N, D), one point per row, got shape {X.shape}")
    n_points, n_features = X.shape
    if isinstance(n_components, bool) or not isinstance(n_components, (int, np.integer)):
        raise TypeError(f"n_components must be an int, got {n_components!r}")
    if not 1 <= n_components <= min(n_points, n_features):
        raise ValueError(
            f"n_components={n_components} must be between 1 and min(N, D) = "
            f"{min(n_points, n_features)} for X of shape {X.shape}"
        )
    X_centred = X - X.mean(axis=0)
    _, singular_values, Vt = np.linalg.svd(X_centred, full_matrices=False)
    components = Vt[:n_components]  # (k, D)
    largest = np.argmax(np.abs(components), axis=1)
    signs = np.sign(components[np.arange(n_components), largest])
    components = components * signs[:, None]
    coords = X_centred @ components.T
    variances = singular_values**2
    total = variances.sum()
    if total == 0.0:  # all points identical: nothing is explained, and no 0 / 0
        explained = np.zeros(n_components)
    else:
        explained = variances[:n_components] / total
    return coords, explained


def pca_scatter(X, labels: Sequence[str], ax=None, title: str | None = None):
    """Scatter the 2-D PCA projection of ``X`` with each point labelled by its token.

    Args:
        X: ``(N, D)`` points, e.g. the embedding rows of ``N`` tokens.
        labels: ``N`` strings written next to their points.
        ax: Axes to draw on; ``None`` makes a new figure.
        title: Axes title.

    Returns:
        The Axes (points in ``ax.collections[0].get_offsets()``, labels in ``ax.texts``).
    """
    coords, explained = pca_2d(X, n_components=2)
    labels = [str(label) for label in labels]
    if len(labels) != coords.shape[0]:
        raise ValueError(f"got {len(labels)} labels for {coords.shape[0]} points (rows of X)")
    if ax is None:
        _, ax = plt.subplots(figsize=(5.5, 5.0), layout="constrained")
    ax.scatter(coords[:, 0], coords[:, 1], s=20, color="C0")
    for (x, y), label in zip(coords, labels, strict=True):
        ax.annotate(label, (x, y), xytext=(3, 3), textcoords="offset points", fontsize=9)
    ax.set_xlabel(f"PC1 ({explained[0]:.0%} of variance)")
    ax.set_ylabel(f"PC2 ({explained[1]:.0%} of variance)")
    ax.axhline(0.0, color="0.85", linewidth=0.8, zorder=0)
    ax.axvline(0.0, color="0.85", linewidth=0.8, zorder=0)
    if title is not None:
        ax.set_title(title)
    return ax


# --------------------------------------------------------------------------- distributions


def before_after_histograms(
    before,
    after,
    labels: tuple[str, str] = ("before", "after"),
    bins: int = 50,
    title: str | None = None,
    xlabel: str = "value",
):
    """Two side-by-side histograms, e.g. activations before and after LayerNorm.

    Each panel has its own x range (a normalised "after" is much narrower than "before") and
    states the mean and standard deviation in its title, the two numbers a norm changes.

    Args:
        before, after: arrays of any shape; all entries are counted.
        labels: panel names.
        bins: number of bins per histogram.
        title: figure title.
        xlabel: what the values are (both panels); the y axes count them.

    Returns:
        The Figure, with two Axes (``fig.axes``).
    """
    fig, axes = plt.subplots(1, 2, figsize=(9.0, 3.5), layout="constrained")
    for ax, data, label, colour in zip(axes, (before, after), labels, ("C0", "C1"), strict=True):
        values = np.asarray(data, dtype=np.float64).ravel()
        ax.hist(values, bins=bins, color=colour, alpha=0.85)
        ax.set_title(f"{label}\nmean {values.mean():.2f}, std {values.std():.2f}")
        ax.set_xlabel(xlabel)
        ax.set_ylabel("count (entries per bin)")
    if title is not None:
        fig.suptitle(title)
    return fig


# --------------------------------------------------------------------------- cost and training


def scaling_plot(
    sizes,
    times,
    ax=None,
    label: str | None = None,
    title: str | None = None,
    reference_exponent: float | None = 2,
    fit_last: int | None = None,
    xlabel: str = "size",
    ylabel: str = "time (s)",
):
    """Measured cost against size on log-log axes, with its fitted slope.

    On log-log axes ``t = c * n**p`` is a straight line of slope ``p``. The legend reads e.g.
    "measured, slope 1.97"; the slope is :func:`tfscratch.timing.fit_loglog` ``(sizes, times,
    last=fit_last)``, which a caller who needs the number (to print or assert) calls directly.
    A dashed line of slope ``reference_exponent``, through the largest measured point, shows
    the cost the theory predicts.

    Args:
        sizes: ``(N,)`` increasing positive sizes (e.g. sequence lengths).
        times: ``(N,)`` positive seconds (e.g. ``ScalingResult.seconds``).
        ax: Axes to draw on; ``None`` makes a new figure. Call again with the same ``ax`` to
            compare several measurements.
        label: legend name of the measurement (default ``"measured"``).
        title: Axes title.
        reference_exponent: slope of the dashed reference line; ``None`` draws none.
        fit_last: fit the slope on the ``fit_last`` largest sizes only (small sizes are
            dominated by overhead); ``None`` fits all.
        xlabel, ylabel: axis labels; both axes are logarithmic, so " (log scale)" is added.

    Returns:
        The Axes.
    """
    sizes = np.asarray(sizes, dtype=np.float64)
    times = np.asarray(times, dtype=np.float64)
    exponent = fit_loglog(sizes, times, last=fit_last)  # also validates shapes and positivity
    if ax is None:
        _, ax = plt.subplots(figsize=(5.5, 4.0), layout="constrained")
    name = "measured" if label is None else label
    (line,) = ax.loglog(sizes, times, "o-", label=f"{name}, slope {exponent:.2f}")
    if reference_exponent is not None:
        # Anchored at the largest size, where the asymptotic cost dominates the overhead.
        reference = times[-1] * (sizes / sizes[-1]) ** reference_exponent
        ax.loglog(
            sizes,
            reference,
            "--",
            color=line.get_color(),
            alpha=0.6,
            label=f"reference, slope {reference_exponent:g}",
        )
    # Tick at the measured sizes themselves (usually powers of two), written as plain numbers:
    # matplotlib's default minor labels on a log axis (3x10^1, 4x10^1, ...) overlap.
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    log_axis(ax, "y")
    log_axis(ax, "x")
    ax.set_xticks(sizes, labels=[f"{size:g}" for size in sizes])
    ax.legend()
    if title is not None:
        ax.set_title(title)
    return ax


def loss_curves(
    history,
    baselines: Mapping[str, float] | None = None,
    ax=None,
    title=None,
    ylabel: str = "cross-entropy loss (nats)",
    log_scale: bool = False,
):
    """Training (and validation) loss against step, with reference losses as dashed lines.

    Args:
        history: a pandas DataFrame (or dict of arrays) with columns ``step`` and
            ``train_loss``, optionally ``val_loss`` (NaN at steps where it was not measured).
        baselines: name -> loss, e.g. ``{"uniform": np.log(vocab_size), "bigram": 2.45}``,
            each drawn as a horizontal dashed line: a model is learning something only once
            it is below them.
        ax: Axes to draw on; ``None`` makes a new figure.
        title: Axes title.
        ylabel: the y axis label; losses of the course are natural-log cross-entropies, in
            nats (1 nat = 1/ln 2 = 1.44 bits).
        log_scale: a logarithmic loss axis (:func:`log_axis`: plain-number ticks, "(log
            scale)" in the label), for losses that fall over several orders of magnitude.

    Returns:
        The Axes.
    """
    missing = [column for column in ("step", "train_loss") if column not in history]
    if missing:
        raise ValueError(f"history needs columns 'step' and 'train_loss'; missing {missing}")
    steps = np.asarray(history["step"], dtype=np.float64)
    if ax is None:
        _, ax = plt.subplots(figsize=(6.5, 4.0), layout="constrained")
    ax.plot(steps, np.asarray(history["train_loss"], dtype=np.float64), color="C0", label="train")
    if "val_loss" in history:
        val_loss = np.asarray(history["val_loss"], dtype=np.float64)
        measured = np.isfinite(val_loss)  # validation runs only every few steps
        if measured.any():
            ax.plot(steps[measured], val_loss[measured], "o-", color="C1", label="validation")
    for index, (name, value) in enumerate((baselines or {}).items()):
        ax.axhline(
            value,
            linestyle="--",
            linewidth=1.2,
            color=BASELINE_COLOURS[index % len(BASELINE_COLOURS)],
            label=f"{name} ({value:.2f})",
        )
    ax.set_xlabel("training step")
    ax.set_ylabel(ylabel)
    if log_scale:
        log_axis(ax, "y")
    ax.legend()
    if title is not None:
        ax.set_title(title)
    return ax


def log_axis(ax, which: str = "y"):
    """Make one axis of ``ax`` logarithmic and readable: plain-number ticks and a label that
    says so.

    Matplotlib's default log ticks read 10^0, 4x10^-1, ... and nothing on the axis says it is
    logarithmic. Here the major ticks sit at 1, 2 and 5 times each power of ten and are written
    as plain numbers (0.05, 0.1, 0.2, 0.5, 1, 2, ...), the minor ticks carry no text, and
    " (log scale)" is appended to the axis label (once).

    Args:
        ax: the Axes.
        which: ``"x"`` or ``"y"``.

    Returns:
        The Axes.
    """
    if which not in ("x", "y"):
        raise ValueError(f"which must be 'x' or 'y', got {which!r}")
    axis = ax.xaxis if which == "x" else ax.yaxis
    (ax.set_xscale if which == "x" else ax.set_yscale)("log")
    axis.set_major_locator(LogLocator(base=10.0, subs=(1.0, 2.0, 5.0)))
    axis.set_major_formatter(FuncFormatter(_plain_number))
    axis.set_minor_formatter(NullFormatter())
    label = axis.get_label_text()
    if "(log scale)" not in label:
        axis.set_label_text(f"{label} (log scale)" if label else "(log scale)")
    return ax


def _plain_number(value: float, _position=None) -> str:
    """A tick value as a plain decimal: 0.0002, 0.5, 3, 2000 (never 2x10^-4)."""
    if value == 0 or not np.isfinite(value):
        return f"{value:g}"
    decimals = max(0, -int(np.floor(np.log10(abs(value)) + 1e-9)))
    text = f"{value:.{decimals}f}"
    return text.rstrip("0").rstrip(".") if "." in text else text
