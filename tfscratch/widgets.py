"""Interactive widgets for the notebooks: a sampling playground and an attention explorer.

The presentation layer (ipywidgets): it may import anything in tfscratch, and nothing
imports it. Each widget is split in two:

* a **pure callback** that does the work and returns plain data, unit-tested like any
  other function: :func:`sample_names` (settings -> list of names) and
  :func:`attention_for` (model, tokens, layer, head -> ``(T, T)`` weights);
* the **wiring**, a small ``VBox`` subclass whose controls call the callback on every change
  and show the result: :class:`SamplingPlayground` and :class:`AttentionExplorer`.

Their ``update()`` method is the handler the controls call; it can be called directly, which
is how the tests (and a notebook running headless, where nobody moves a slider) drive them.
A notebook asserts on what ``update()`` stored (``names``, ``weights``), never on pixels.

A saved notebook keeps a live widget only as a model id: on GitHub, on nbviewer, or in Lab
without a kernel, it shows nothing of the widget's state. So both widgets derive from
:class:`StaticViewBox`: the one output a widget makes in a notebook carries, beside the live
widget, a **static view** of its state (the settings and sampled names as HTML and text; the
heatmap as a PNG). JupyterLab shows the live widget and only it; a page that cannot run a
widget (GitHub, nbviewer) falls back to the static view. Every ``update()`` refreshes it through
a display handle, so a notebook executed headless stores each widget's last state.
"""

from __future__ import annotations

import base64
import html
import io
from collections.abc import Sequence

import ipywidgets as widgets
import numpy as np
from IPython import get_ipython
from IPython.display import display
from matplotlib.figure import Figure

from .checks import check_int, check_positive_int, check_seed, check_token_ids
from .functional import causal_mask
from .generation import generate
from .models import DecoderLM
from .module import evaluating, no_grad
from .tokenizers import Tokenizer
from .viz import attention_heatmap

__all__ = [
    "AttentionExplorer",
    "SamplingPlayground",
    "StaticViewBox",
    "attention_for",
    "sample_names",
]


# --------------------------------------------------------------------------- callbacks


def _check_pair(model, tokenizer) -> None:
    """A DecoderLM and the tokenizer it was trained with (same vocabulary size)."""
    if not isinstance(model, DecoderLM):
        raise TypeError(f"model must be a DecoderLM, got {type(model).__name__}")
    if not isinstance(tokenizer, Tokenizer):
        raise TypeError(
            f"tokenizer must be a tfscratch Tokenizer (e.g. CharTokenizer), "
            f"got {type(tokenizer).__name__}"
        )
    if tokenizer.vocab_size != model.vocab_size:
        raise ValueError(
            f"tokenizer has vocab_size={tokenizer.vocab_size} but the model has "
            f"vocab_size={model.vocab_size}; use the tokenizer the model was trained with"
        )


def _encode_known(tokenizer: Tokenizer, text: str, what: str) -> list[int]:
    """``<bos>`` + the ids of ``text``; a symbol the model never saw is an error whose advice
    a widget user can follow: which symbols are unknown, and which ones the model knows.

    (The tokenizer's own message suggests ``encode(..., unknown='unk')``, an option of code,
    not of a text box; and a prompt of ``<unk>`` tokens would not mean what was typed.)"""
    known = set(tokenizer.vocab)
    unknown = list(dict.fromkeys(t for t in tokenizer.split(text) if t not in known))
    if unknown:
        listed = " and ".join(repr(token) for token in unknown[:5])
        verb = "is" if len(unknown) == 1 else "are"
        vocab = tokenizer.vocab
        separator = "" if tokenizer.unit == "characters" else " "
        shown = separator.join(vocab[:60]) + (" ..." if len(vocab) > 60 else "")
        raise ValueError(
            f"{what} cannot be encoded: {listed} {verb} not among the {len(vocab)} "
            f"{tokenizer.unit} this model knows ({shown}); use only those"
        )
    return tokenizer.encode(text, add_bos=True, unknown="error")


def sample_names(
    model: DecoderLM,
    tokenizer: Tokenizer,
    temperature: float = 1.0,
    top_k: int | None = None,
    top_p: float | None = None,
    seed: int | None = 0,
    n: int = 10,
    prompt: str = "",
) -> list[str]:
    """Sample ``n`` names (texts) from a character language model.

    Each sample starts from ``<bos>`` followed by the prompt's tokens and is continued with
    :func:`tfscratch.generate` until ``<eos>`` or the model's ``max_len``.

    Args:
        model: a trained :class:`~tfscratch.models.DecoderLM`.
        tokenizer: its tokenizer (``tokenizer.vocab_size == model.vocab_size``).
        temperature: ``>= 0``; 0 is greedy (every sample is then the same).
        top_k: keep the ``top_k`` most likely tokens; ``0`` or ``None`` means off.
        top_p: keep the smallest set of tokens whose probability reaches ``top_p``, in
            ``(0, 1]``; ``None`` or ``1.0`` means off.
        seed: fixes all ``n`` samples (the same seed gives the same list); ``None`` gives
            fresh randomness on every call.
        n: number of samples, ``>= 1``.
        prompt: the text every sample starts with (``"em"`` -> names beginning with "em");
            each of its symbols must be in the vocabulary.

    Returns:
        ``n`` strings, each the prompt plus its continuation, without special tokens.
    """
    _check_pair(model, tokenizer)
    n = check_positive_int(n, "n")
    seed = check_seed(seed)
    if not isinstance(prompt, str):
        raise TypeError(f"prompt must be a str, got {type(prompt).__name__} {prompt!r}")
    if top_k is not None and (isinstance(top_k, bool) or not isinstance(top_k, (int, np.integer))):
        raise TypeError(f"top_k must be an int (0 or None = off), got {top_k!r}")
    if top_k is not None and top_k < 0:
        raise ValueError(f"top_k={top_k!r} must be >= 0 (0 or None = off)")
    prompt_ids = _encode_known(tokenizer, prompt, f"prompt={prompt!r}")
    room = model.max_len - len(prompt_ids)
    if room < 1:
        raise ValueError(
            f"prompt={prompt!r} has {len(prompt_ids) - 1} tokens; with <bos> this model "
            f"(max_len={model.max_len}) has no room left to generate: use at most "
            f"{model.max_len - 2} tokens"
        )
    # One independent, reproducible seed per sample, all derived from `seed`: sample i does
    # not depend on how many samples were asked for.
    if seed is None:
        sample_seeds = [None] * n
    else:
        sample_seeds = [int(s) for s in np.random.SeedSequence(seed).generate_state(n)]
    names = []
    for sample_seed in sample_seeds:
        new_ids = generate(
            model,
            prompt_ids,
            max_new_tokens=room,
            temperature=temperature,
            top_k=top_k or None,  # 0 means off, as the slider shows it
            top_p=top_p,
            stop_token=tokenizer.eos_id,
            seed=sample_seed,
        )
        names.append(tokenizer.decode(prompt_ids + new_ids))
    return names


def attention_for(model: DecoderLM, tokens, layer: int, head: int) -> np.ndarray:
    """The attention weights of one head of one layer for one token sequence.

    Args:
        model: a :class:`~tfscratch.models.DecoderLM`.
        tokens: 1-D sequence of ``T`` token ids (e.g. ``<bos>`` then a name's characters),
            ``1 <= T <= model.max_len``.
        layer: block index in ``[0, n_layers)``.
        head: head index in ``[0, n_heads)``.

    Returns:
        float ``(T, T)``: row ``i`` is how position ``i`` spreads its attention over positions
        ``0..T-1``; each row sums to 1 and is zero right of the diagonal (causal).
    """
    if not isinstance(model, DecoderLM):
        raise TypeError(f"model must be a DecoderLM, got {type(model).__name__}")
    tokens = check_token_ids(tokens, "tokens", model.vocab_size, ndim=1)
    if tokens.size == 0:
        raise ValueError("tokens is empty; give at least one token id (e.g. the <bos> id)")
    n_layers, n_heads = len(model.blocks), model.config["n_heads"]
    for name, value, count in (("layer", layer, n_layers), ("head", head, n_heads)):
        if not 0 <= check_int(value, name) < count:
            raise ValueError(f"{name}={value} must be in [0, {count}): this model has {count}")
    # dropout off: the picture is the model's, not one random mask's
    with evaluating(model), no_grad():
        model(tokens[None, :])
    return model.blocks[layer].attn.attn_weights[0, head].copy()


# --------------------------------------------------------------------------- wiring


def _handling_a_frontend_event() -> bool:
    """Whether the kernel is handling a widget message from the frontend (a slider moved, a
    prompt entered) rather than running code: its current request is then a ``comm_msg``."""
    kernel = getattr(get_ipython(), "kernel", None)
    if kernel is None or not hasattr(kernel, "get_parent"):
        return False
    parent = kernel.get_parent() or {}
    return parent.get("header", {}).get("msg_type") == "comm_msg"


class StaticViewBox(widgets.VBox):
    """A ``VBox`` whose notebook output also holds a static view of its state.

    ``display(box)`` (or ``box`` as the last line of a cell) makes **one** output. Its
    mimebundle holds the live widget (``application/vnd.jupyter.widget-view+json``) and, in
    the same bundle, :meth:`static_view` (``text/plain`` with ``text/html`` or ``image/png``):
    the alternatives a frontend chooses from. JupyterLab renders the widget and nothing else;
    GitHub and nbviewer, which cannot run a widget, render the static view instead.

    :meth:`refresh_static_view`, which a subclass calls at the end of every ``update()``,
    re-sends the bundle through a display handle when code changed the widget (a cell, or a
    notebook executed headless: ``make notebooks``, nbval), so the stored notebook shows the
    last state. When a learner moves a control, the frontend already shows the new state in
    the live widget, and a re-sent bundle would make JupyterLab draw the widget anew under
    their hand (losing the focus of the slider they hold): then the refresh does nothing.
    Outside a notebook nothing is displayed and the refresh does nothing either.

    The output's metadata, ``{"tfscratch": {"static_view_of": <class>, "error": ...}}``,
    says which widget it holds and whether that widget shows an error (``error`` is the
    message, ``None`` when the settings are valid), so a test can check a stored notebook.

    Subclasses implement ``update()``, :meth:`static_view` and set ``error``.
    """

    error: str | None = None

    def static_view(self) -> dict[str, str]:
        """The widget's current state as a mimebundle that renders without a kernel."""
        raise NotImplementedError

    def static_view_metadata(self) -> dict:
        """The output's metadata: ``{"tfscratch": {"static_view_of": <class>, "error": ...}}``."""
        return {"tfscratch": {"static_view_of": type(self).__name__, "error": self.error}}

    def refresh_static_view(self) -> None:
        """Re-send the widget with its current static view wherever it was displayed, unless
        the change came from the frontend (a control the learner moved)."""
        if _handling_a_frontend_event():
            return
        for handle in getattr(self, "_static_view_handles", []):
            handle.update(self._repr_mimebundle_(), metadata=self.static_view_metadata(), raw=True)

    def _repr_mimebundle_(self, **kwargs) -> dict:
        """The live widget and, beside it, the static view; its text is the view's text (not
        the widget's repr, cut off after 110 characters)."""
        return {**super()._repr_mimebundle_(**kwargs), **self.static_view()}

    def _ipython_display_(self) -> None:
        # IPython calls this instead of _repr_mimebundle_: one output, kept for refreshes.
        handle = display(
            self._repr_mimebundle_(),
            metadata=self.static_view_metadata(),
            raw=True,
            display_id=True,
        )
        if not hasattr(self, "_static_view_handles"):
            self._static_view_handles = []
        self._static_view_handles.append(handle)


# How a sample with no characters is shown: the model ended it (<eos>) before anything else.
EMPTY_SAMPLE = "(empty: <eos> first)"


def _name_html(name: str, prompt: str) -> str:
    """One sample as HTML: the prompt in bold so the continuation stands out; an empty sample
    says so in grey instead of showing nothing."""
    if not name:
        return f"<span style='color: #777'>{html.escape(EMPTY_SAMPLE)}</span>"
    if not prompt:
        return html.escape(name)
    return f"<b>{html.escape(prompt)}</b>{html.escape(name.removeprefix(prompt))}"


def _names_html(names: Sequence[str], prompt: str) -> str:
    """Names as an HTML list, three columns."""
    items = "".join(f"<li><code>{_name_html(name, prompt)}</code></li>" for name in names)
    return f"<ol style='columns: 3'>{items}</ol>"


def _error_html(error: Exception | str) -> str:
    return f"<p style='color: #b00020'>{html.escape(str(error))}</p>"


def _settings_text(settings: dict) -> str:
    """The playground's settings in words: 'temperature 1.0, top-k off, ... prompt 'em''."""
    top_k = settings["top_k"] or "off"
    top_p = round(settings["top_p"], 2) if settings["top_p"] < 1.0 else "off"
    return (
        f"temperature {round(settings['temperature'], 2)}, top-k {top_k}, top-p {top_p}, "
        f"seed {settings['seed']}, {settings['n']} samples, prompt {settings['prompt']!r}"
    )


# Shown next to the prompt box, which samples when Enter is pressed.
PROMPT_HINT = "press Enter to sample"


class SamplingPlayground(StaticViewBox):
    """Sliders for temperature, top-k, top-p, seed and number of samples, a prompt box, and
    the sampled names below them.

    Every change calls :meth:`update`, which calls :func:`sample_names` and shows its result
    in ``output`` (an ``HTML`` widget). ``names`` holds the last list, ``error`` the message
    of the last bad setting (``None`` when the settings were fine): a bad prompt shows its
    error in the output instead of raising in the middle of the learner's interaction.

    Display it as the last expression of a cell (``SamplingPlayground(model, tok)``); its
    static view, what a page without a kernel shows instead, lists the settings and the names
    (see :class:`StaticViewBox`). The prompt box samples when Enter is pressed, and says so.

    Args:
        model: a trained :class:`~tfscratch.models.DecoderLM`.
        tokenizer: its tokenizer (the same ``vocab_size``).
        temperature, top_k, top_p, seed, n, prompt: the controls' starting values, as in
            :func:`sample_names` (``top_k=0`` and ``top_p=1.0`` mean off).
    """

    def __init__(
        self,
        model: DecoderLM,
        tokenizer: Tokenizer,
        temperature: float = 1.0,
        top_k: int = 0,
        top_p: float = 1.0,
        seed: int = 0,
        n: int = 12,
        prompt: str = "",
    ):
        _check_pair(model, tokenizer)
        self.model, self.tokenizer = model, tokenizer
        no_dragging = {"continuous_update": False}  # sample once on release, not per pixel
        self.temperature = widgets.FloatSlider(
            value=temperature,
            min=0.0,
            max=2.0,
            step=0.05,
            description="temperature",
            **no_dragging,
        )
        self.top_k = widgets.IntSlider(
            value=top_k, min=0, max=model.vocab_size, description="top-k (0 off)", **no_dragging
        )
        self.top_p = widgets.FloatSlider(
            value=top_p,
            min=0.05,
            max=1.0,
            step=0.05,
            description="top-p (1 off)",
            **no_dragging,
        )
        self.seed = widgets.BoundedIntText(value=seed, min=0, max=2**31 - 1, description="seed")
        self.n = widgets.IntSlider(value=n, min=1, max=40, description="samples", **no_dragging)
        # Sampled on Enter (or when the box loses focus), not on every keystroke: say so.
        self.prompt = widgets.Text(
            value=prompt,
            description="prompt",
            placeholder="e.g. em, then Enter",
            tooltip="Type how the names start, then press Enter",
            **no_dragging,
        )
        self.prompt_hint = widgets.HTML(
            f"<small style='white-space: nowrap'>{html.escape(PROMPT_HINT)}</small>"
        )
        self.output = widgets.HTML()
        self.names: list[str] = []
        self.error: str | None = None
        self.controls = (self.temperature, self.top_k, self.top_p, self.seed, self.n, self.prompt)
        for control in self.controls:
            control.style.description_width = "initial"
            control.observe(self.update, names="value")
        super().__init__(
            [
                widgets.HBox([self.temperature, self.top_k, self.top_p]),
                widgets.HBox([self.seed, self.n, self.prompt, self.prompt_hint]),
                self.output,
            ]
        )
        self.update()

    def settings(self) -> dict:
        """The controls' current values, as keyword arguments of :func:`sample_names`."""
        return {
            "temperature": float(self.temperature.value),
            "top_k": int(self.top_k.value),
            "top_p": float(self.top_p.value),
            "seed": int(self.seed.value),
            "n": int(self.n.value),
            "prompt": self.prompt.value,
        }

    def update(self, change=None) -> None:
        """Sample with the current settings and show the names (the controls' handler).

        Args:
            change: the ipywidgets change event (unused; None when called by hand).
        """
        settings = self.settings()
        try:
            self.names = sample_names(self.model, self.tokenizer, **settings)
        except (TypeError, ValueError) as error:
            self.names, self.error = [], str(error)
            self.output.value = _error_html(error)
        else:
            self.error = None
            self.output.value = _names_html(self.names, settings["prompt"])
        self.refresh_static_view()

    def static_view(self) -> dict[str, str]:
        """The settings and the sampled names (or the error), as text and HTML.

        One compact paragraph: the settings, then the names (an empty one as
        ``EMPTY_SAMPLE``), the prompt part in bold.
        """
        settings = _settings_text(self.settings())
        caption = f"<small>Static view · SamplingPlayground: {html.escape(settings)}</small>"
        if self.error is not None:
            return {
                "text/plain": f"SamplingPlayground ({settings}): error: {self.error}",
                "text/html": caption + _error_html(self.error),
            }
        shown = [_name_html(name, self.prompt.value) for name in self.names]
        listed = [name or EMPTY_SAMPLE for name in self.names]
        return {
            "text/plain": f"SamplingPlayground ({settings}):\n" + ", ".join(listed),
            "text/html": f"<p>{caption}<br><code>{', '.join(shown)}</code></p>",
        }


# The explorer's heatmap: at most 4 inches at 100 dpi, so 400 px, whatever the name's length.
HEATMAP_DPI = 100
HEATMAP_MAX_INCHES = 4.0


class AttentionExplorer(StaticViewBox):
    """Dropdowns for layer, head and example text; the head's attention heatmap below.

    Every change calls :meth:`update`, which calls :func:`attention_for` on ``<bos>`` plus
    the example's tokens, draws it with :func:`tfscratch.viz.attention_heatmap` (tokens as
    tick labels, the blocked future in grey) and shows the PNG in ``image``. ``weights``
    holds the last ``(T, T)`` array, ``labels`` its tokens and ``figure`` the last Figure.

    The Figure is made without pyplot, so a notebook does not also draw it below the widget.
    It is at most 400 px tall, so the dropdowns and the picture fit on a laptop screen. The
    static view is the same picture, with the weights as text (see :class:`StaticViewBox`).

    Args:
        model: a :class:`~tfscratch.models.DecoderLM`.
        tokenizer: its tokenizer.
        examples: the texts to choose from (each fits the model with its ``<bos>``).
        layer, head: the starting selection.
    """

    def __init__(
        self,
        model: DecoderLM,
        tokenizer: Tokenizer,
        examples: Sequence[str],
        layer: int = 0,
        head: int = 0,
    ):
        _check_pair(model, tokenizer)
        if isinstance(examples, str) or not isinstance(examples, Sequence) or not examples:
            raise ValueError(f"examples must be a non-empty list of texts, got {examples!r:.60}")
        self.model, self.tokenizer = model, tokenizer
        # Encode every example now, so a bad one fails here, naming it, not on selection.
        self._examples = {}
        for text in examples:
            if not isinstance(text, str):
                raise TypeError(f"examples must hold str, got {type(text).__name__} {text!r}")
            ids = _encode_known(tokenizer, text, f"example {text!r}")
            if len(ids) > model.max_len:
                raise ValueError(
                    f"example {text!r} has {len(ids)} tokens with <bos>; the model's "
                    f"max_len is {model.max_len}"
                )
            self._examples[text] = ids
        n_layers, n_heads = len(model.blocks), model.config["n_heads"]
        self.layer = widgets.Dropdown(
            options=[(f"layer {i}", i) for i in range(n_layers)],
            value=layer,
            description="layer",
        )
        self.head = widgets.Dropdown(
            options=[(f"head {i}", i) for i in range(n_heads)], value=head, description="head"
        )
        self.example = widgets.Dropdown(options=list(self._examples), description="example")
        # At its own size: stretched to the box's width, the picture grew taller than a screen.
        self.image = widgets.Image(format="png", layout=widgets.Layout(align_self="flex-start"))
        self.weights: np.ndarray | None = None
        self.labels: list[str] = []
        self.figure: Figure | None = None
        for control in (self.layer, self.head, self.example):
            control.observe(self.update, names="value")
        super().__init__([widgets.HBox([self.layer, self.head, self.example]), self.image])
        self.update()

    def update(self, change=None) -> None:
        """Recompute and redraw the selected head's attention (the dropdowns' handler).

        Args:
            change: the ipywidgets change event (unused; None when called by hand).
        """
        layer, head, text = self.layer.value, self.head.value, self.example.value
        ids = self._examples[text]
        self.weights = attention_for(self.model, ids, layer, head)
        self.labels = [self.tokenizer.tokens[i] for i in ids]
        # Causal: the future is blocked, not "weight 0"; mask it so it is drawn grey.
        shown = np.ma.masked_array(self.weights, mask=causal_mask(len(ids)))
        # Small enough to sit below the dropdowns on a laptop screen (<= 400 px tall).
        size = min(1.8 + 0.2 * len(ids), HEATMAP_MAX_INCHES)
        figure = Figure(figsize=(size + 0.9, size), layout="constrained")
        ax = attention_heatmap(
            shown,
            self.labels,
            self.labels,
            ax=figure.add_subplot(),
            title=f"layer {layer}, head {head}: {text!r}",
            vmin=0.0,
            vmax=1.0,
        )
        ax.images[0].colorbar.set_label("attention weight")
        buffer = io.BytesIO()
        figure.savefig(buffer, format="png", dpi=HEATMAP_DPI)
        self.figure = figure
        width, height = (figure.get_size_inches() * HEATMAP_DPI).round().astype(int)
        self.image.value = buffer.getvalue()
        self.image.width, self.image.height = str(width), str(height)
        self.refresh_static_view()

    def static_view(self) -> dict[str, str]:
        """The heatmap (PNG, base64 as notebooks store it) and the weights as a text table."""
        width = max(len(label) for label in self.labels)
        header = " " * width + " " + " ".join(f"{label:>{width}}" for label in self.labels)
        rows = [
            f"{label:>{width}} "
            + " ".join(f"{value:>{width}.2f}" for value in row[: i + 1])  # the future: blank
            for i, (label, row) in enumerate(zip(self.labels, self.weights, strict=True))
        ]
        title = f"AttentionExplorer: layer {self.layer.value}, head {self.head.value}, "
        title += f"{self.example.value!r} (row = query, column = key)"
        return {
            "text/plain": "\n".join([title, header, *rows]),
            "image/png": base64.b64encode(self.image.value).decode("ascii"),
        }
