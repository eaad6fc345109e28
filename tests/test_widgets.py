"""tfscratch.widgets: the pure callbacks, then the widgets built headless and driven by hand."""

import base64
import html
import inspect
import io
import re
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # headless: must precede any pyplot import

import numpy as np
import pytest
from PIL import Image

import tfscratch
import tfscratch.widgets
from tfscratch import DecoderLM, generate
from tfscratch import functional as F
from tfscratch.tokenizers import CharTokenizer
from tfscratch.widgets import (
    AttentionExplorer,
    SamplingPlayground,
    StaticViewBox,
    attention_for,
    sample_names,
)

from .conftest import randomize

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def tokenizer():
    return CharTokenizer(vocab="abcdefghijklmnopqrstuvwxyz")


@pytest.fixture(scope="module")
def model(tokenizer):
    """A small untrained LM with O(1) weights, so its next-token distributions are far from
    uniform and samples differ clearly from greedy picks."""
    lm = DecoderLM(tokenizer.vocab_size, d_model=16, n_heads=4, n_layers=2, max_len=10, seed=0)
    return randomize(lm, seed=1, std=0.3)


def letters_only(name):
    return re.fullmatch(r"[a-z]*", name) is not None


# --------------------------------------------------------------------------- sample_names


def test_sample_names_is_deterministic_for_a_seed(model, tokenizer):
    first = sample_names(model, tokenizer, temperature=1.0, seed=7, n=6)
    again = sample_names(model, tokenizer, temperature=1.0, seed=7, n=6)
    other = sample_names(model, tokenizer, temperature=1.0, seed=8, n=6)
    assert first == again
    assert first != other


def test_sample_names_returns_n_texts_that_start_with_the_prompt(model, tokenizer):
    names = sample_names(model, tokenizer, seed=0, n=5, prompt="em")
    assert len(names) == 5
    assert all(name.startswith("em") for name in names)
    # at most max_len - 1 tokens after <bos> (this untrained model also writes "<unk>")
    assert all(len(name.replace("<unk>", "?")) <= model.max_len - 1 for name in names)


def test_sample_i_does_not_depend_on_how_many_were_asked_for(model, tokenizer):
    few = sample_names(model, tokenizer, seed=3, n=2)
    many = sample_names(model, tokenizer, seed=3, n=5)
    assert many[:2] == few


def test_samples_differ_from_each_other_at_temperature_one(model, tokenizer):
    names = sample_names(model, tokenizer, temperature=1.0, seed=0, n=8)
    assert len(set(names)) > 1


def test_top_k_one_is_greedy(model, tokenizer):
    greedy = sample_names(model, tokenizer, temperature=0.0, seed=0, n=3)
    top1 = sample_names(model, tokenizer, temperature=1.5, top_k=1, seed=11, n=3)
    assert top1 == greedy
    assert len(set(greedy)) == 1  # greedy has no randomness: every sample is the same
    bos = tokenizer.bos_id
    expected = generate(model, [bos], model.max_len - 1, temperature=0, stop_token=tokenizer.eos_id)
    assert greedy[0] == tokenizer.decode([bos, *expected])


def test_top_k_zero_and_none_both_mean_off(model, tokenizer):
    off = sample_names(model, tokenizer, top_k=None, seed=5, n=4)
    assert sample_names(model, tokenizer, top_k=0, seed=5, n=4) == off
    # top_k = vocab_size keeps every token, which is also "off"
    assert sample_names(model, tokenizer, top_k=tokenizer.vocab_size, seed=5, n=4) == off


def test_top_p_one_means_off(model, tokenizer):
    off = sample_names(model, tokenizer, top_p=None, seed=2, n=4)
    assert sample_names(model, tokenizer, top_p=1.0, seed=2, n=4) == off


def test_sample_names_matches_generate_sample_by_sample(model, tokenizer):
    seeds = np.random.SeedSequence(4).generate_state(2)
    names = sample_names(
        model, tokenizer, temperature=0.8, top_k=5, top_p=0.9, seed=4, n=2, prompt="a"
    )
    prompt = tokenizer.encode("a", add_bos=True)
    for name, seed in zip(names, seeds, strict=True):
        new = generate(
            model,
            prompt,
            model.max_len - 2,
            temperature=0.8,
            top_k=5,
            top_p=0.9,
            stop_token=tokenizer.eos_id,
            seed=int(seed),
        )
        assert name == tokenizer.decode(prompt + new)


@pytest.mark.parametrize(
    ("kwargs", "error", "named"),
    [
        ({"temperature": -0.5}, ValueError, "temperature"),
        ({"temperature": "hot"}, TypeError, "temperature"),
        ({"top_k": -1}, ValueError, "top_k"),
        ({"top_k": 2.5}, TypeError, "top_k"),
        ({"top_p": 0.0}, ValueError, "top_p"),
        ({"top_p": 1.5}, ValueError, "top_p"),
        ({"n": 0}, ValueError, "n=0"),
        ({"seed": "x"}, TypeError, "seed"),
        ({"seed": -1}, ValueError, "seed"),
        ({"prompt": "Em"}, ValueError, "prompt='Em'"),
        ({"prompt": 5}, TypeError, "prompt"),
        ({"prompt": "abcdefghij"}, ValueError, "max_len=10"),
    ],
)
def test_sample_names_rejects_bad_settings_naming_them(model, tokenizer, kwargs, error, named):
    with pytest.raises(error, match=re.escape(named)):
        sample_names(model, tokenizer, **{"n": 2, **kwargs})


def test_sample_names_rejects_a_tokenizer_of_another_model(model):
    with pytest.raises(ValueError, match="vocab_size"):
        sample_names(model, CharTokenizer(vocab="abc"), n=1)
    with pytest.raises(TypeError, match="DecoderLM"):
        sample_names("not a model", CharTokenizer(vocab="abc"), n=1)


# --------------------------------------------------------------------------- attention_for


def test_attention_for_is_a_causal_probability_matrix(model, tokenizer):
    tokens = tokenizer.encode("emma", add_bos=True)
    weights = attention_for(model, tokens, layer=1, head=2)
    assert weights.shape == (5, 5)
    np.testing.assert_allclose(weights.sum(axis=-1), 1.0, rtol=1e-5)
    assert np.all(weights[np.triu_indices(5, k=1)] == 0)


def test_attention_for_layer_zero_matches_the_formula(model, tokenizer):
    """Layer 0 by hand: softmax((LN(x) Wq)(LN(x) Wk)^T / sqrt(d_head) + causal mask)."""
    tokens = np.asarray(tokenizer.encode("olivia", add_bos=True))
    T, head, d_head = len(tokens), 3, 16 // 4
    block = model.blocks[0]
    x = model.tok_emb.weight.data[tokens] + model.pos_emb.weight.data[:T]
    h = F.layer_norm(x, block.ln1.gamma.data, block.ln1.beta.data)
    columns = slice(head * d_head, (head + 1) * d_head)
    q = (h @ block.attn.q_proj.weight.data + block.attn.q_proj.bias.data)[:, columns]
    k = (h @ block.attn.k_proj.weight.data + block.attn.k_proj.bias.data)[:, columns]
    scores = np.where(F.causal_mask(T), -np.inf, q @ k.T / np.sqrt(d_head))
    np.testing.assert_allclose(
        attention_for(model, tokens, layer=0, head=head), F.softmax(scores), rtol=1e-5, atol=1e-6
    )


def test_attention_for_depends_on_layer_and_head(model, tokenizer):
    tokens = tokenizer.encode("emma", add_bos=True)
    base = attention_for(model, tokens, 0, 0)
    assert not np.allclose(base, attention_for(model, tokens, 0, 1))
    assert not np.allclose(base, attention_for(model, tokens, 1, 0))


def test_attention_for_leaves_the_training_mode_alone(model, tokenizer):
    model.train()
    attention_for(model, [1, 5], 0, 0)
    assert model.training
    model.eval()
    attention_for(model, [1, 5], 0, 0)
    assert not model.training


@pytest.mark.parametrize(
    ("args", "error", "named"),
    [
        (([1, 5], 2, 0), ValueError, "layer=2"),
        (([1, 5], -1, 0), ValueError, "layer=-1"),
        (([1, 5], 0, 4), ValueError, "head=4"),
        (([1, 5], 0, 1.0), TypeError, "head"),
        (([], 0, 0), ValueError, "tokens"),
        (([1, 99], 0, 0), ValueError, "tokens"),
        (([[1, 5]], 0, 0), ValueError, "tokens"),
    ],
)
def test_attention_for_rejects_bad_input_naming_it(model, args, error, named):
    with pytest.raises(error, match=re.escape(named)):
        attention_for(model, *args)


# --------------------------------------------------------------------------- the widgets


def test_playground_builds_headless_and_shows_the_default_samples(model, tokenizer):
    playground = SamplingPlayground(model, tokenizer, n=4, seed=1)
    expected = sample_names(model, tokenizer, temperature=1.0, top_k=0, top_p=1.0, seed=1, n=4)
    assert playground.names == expected
    assert playground.error is None
    for name in expected:
        assert f"<code>{html.escape(name)}</code>" in playground.output.value


def test_playground_update_follows_the_controls(model, tokenizer):
    playground = SamplingPlayground(model, tokenizer, n=4, seed=1)
    before = playground.output.value
    playground.temperature.value = 0.0  # the slider's observer calls update()
    greedy = sample_names(model, tokenizer, temperature=0.0, seed=1, n=4)
    assert playground.names == greedy
    assert playground.output.value != before

    playground.temperature.value, playground.prompt.value = 1.0, "ka"
    playground.n.value, playground.seed.value = 3, 9
    playground.update()  # and the handler can be called directly
    assert playground.names == sample_names(model, tokenizer, seed=9, n=3, prompt="ka")
    assert all(name.startswith("ka") for name in playground.names)
    assert playground.output.value.count("<b>ka</b>") == 3


def test_playground_shows_a_bad_prompt_as_an_error_instead_of_raising(model, tokenizer):
    playground = SamplingPlayground(model, tokenizer, n=2)
    playground.prompt.value = "K!"
    assert playground.names == []
    assert "prompt='K!'" in playground.error
    assert "prompt=&#x27;K!&#x27;" in playground.output.value  # escaped for HTML
    playground.prompt.value = "k"
    assert playground.error is None and len(playground.names) == 2


def test_playground_says_that_the_prompt_box_samples_on_enter(model, tokenizer):
    """The prompt box samples when Enter is pressed (not on every keystroke): it says so, in
    the placeholder and in a hint that stays beside it once something is typed."""
    playground = SamplingPlayground(model, tokenizer, n=2)
    assert "Enter" in playground.prompt.placeholder and "Enter" in playground.prompt.tooltip
    assert "press Enter" in playground.prompt_hint.value
    row = playground.children[1].children
    assert row[row.index(playground.prompt) + 1] is playground.prompt_hint


def test_an_empty_sample_is_shown_as_empty_not_as_a_blank(model, tokenizer, monkeypatch):
    names = ["", "emma", ""]  # a model may end a name (<eos>) before its first letter
    monkeypatch.setattr(tfscratch.widgets, "sample_names", lambda *args, **kwargs: names)
    playground = SamplingPlayground(model, tokenizer, n=3)
    empty = html.escape(tfscratch.widgets.EMPTY_SAMPLE)
    items = re.findall(r"<li><code>(.*?)</code></li>", playground.output.value)
    assert len(items) == 3 and empty in items[0] and items[1] == "emma" and empty in items[2]
    view = playground.static_view()
    assert view["text/plain"].endswith("(empty: <eos> first), emma, (empty: <eos> first)")
    assert view["text/html"].count(empty) == 2


def test_an_unknown_symbol_error_says_what_a_widget_user_can_type(model, tokenizer):
    """Not the tokenizer's advice (encode(..., unknown='unk'), an option a text box lacks):
    which symbols are unknown, and the ones the model knows."""
    playground = SamplingPlayground(model, tokenizer, n=2)
    playground.prompt.value = "Em!"
    error = playground.error
    assert error.startswith("prompt='Em!' cannot be encoded: 'E' and '!' are not among")
    assert "the 26 characters this model knows (abcdefghijklmnopqrstuvwxyz)" in error
    assert "unknown=" not in error and "unknown=" not in playground.output.value
    with pytest.raises(ValueError, match="'E' is not among") as raised:
        AttentionExplorer(model, tokenizer, ["Emma"])
    assert "unknown=" not in str(raised.value)


def test_playground_settings_are_the_callback_arguments(model, tokenizer):
    playground = SamplingPlayground(
        model, tokenizer, temperature=0.7, top_k=3, top_p=0.9, seed=4, n=2, prompt="a"
    )
    assert playground.settings() == {
        "temperature": 0.7,
        "top_k": 3,
        "top_p": 0.9,
        "seed": 4,
        "n": 2,
        "prompt": "a",
    }
    assert playground.top_k.max == tokenizer.vocab_size


def test_explorer_builds_headless_and_draws_the_selected_head(model, tokenizer):
    explorer = AttentionExplorer(model, tokenizer, ["emma", "olivia"])
    expected = attention_for(model, tokenizer.encode("emma", add_bos=True), 0, 0)
    np.testing.assert_array_equal(explorer.weights, expected)
    assert explorer.labels == ["<bos>", "e", "m", "m", "a"]
    assert bytes(explorer.image.value).startswith(PNG_MAGIC)
    ax = explorer.figure.axes[0]
    np.testing.assert_array_equal(ax.images[0].get_array().filled(0.0), expected)
    assert [t.get_text() for t in ax.get_xticklabels()] == explorer.labels


def test_explorer_update_follows_the_dropdowns(model, tokenizer):
    explorer = AttentionExplorer(model, tokenizer, ["emma", "olivia"])
    first_png = bytes(explorer.image.value)
    explorer.layer.value, explorer.head.value = 1, 3
    tokens = tokenizer.encode("emma", add_bos=True)
    np.testing.assert_array_equal(explorer.weights, attention_for(model, tokens, 1, 3))
    assert bytes(explorer.image.value) != first_png
    explorer.example.value = "olivia"
    assert explorer.weights.shape == (7, 7)
    assert explorer.figure.axes[0].get_title() == "layer 1, head 3: 'olivia'"


def test_explorer_heatmap_fits_a_laptop_screen(tokenizer):
    """At most 400 px tall below the dropdowns, even for the longest name the model takes."""
    model = DecoderLM(tokenizer.vocab_size, d_model=8, n_heads=2, n_layers=1, max_len=32, seed=0)
    longest, short = "a" * (model.max_len - 1), "emma"
    explorer = AttentionExplorer(model, tokenizer, [longest, short])
    for example in (longest, short):
        explorer.example.value = example
        width, height = Image.open(io.BytesIO(bytes(explorer.image.value))).size
        assert height <= 400 and width <= 520, (example, width, height)
        # shown at that size, not stretched to the width of the box (and taller with it)
        assert (explorer.image.width, explorer.image.height) == (str(width), str(height))
        assert explorer.image.layout.align_self == "flex-start"
    colorbar = explorer.figure.axes[0].images[0].colorbar
    assert colorbar.ax.get_ylabel() == "attention weight"


def test_explorer_rejects_examples_it_cannot_encode(model, tokenizer):
    with pytest.raises(ValueError, match="example 'Emma'"):
        AttentionExplorer(model, tokenizer, ["Emma"])
    with pytest.raises(ValueError, match="max_len"):
        AttentionExplorer(model, tokenizer, ["abcdefghijk"])
    with pytest.raises(ValueError, match="examples"):
        AttentionExplorer(model, tokenizer, "emma")


# --------------------------------------------------------------------------- static views


def test_playground_static_view_lists_the_settings_and_the_names(model, tokenizer):
    playground = SamplingPlayground(model, tokenizer, temperature=0.8, top_p=0.9, n=3, prompt="k")
    view = playground.static_view()
    settings = "temperature 0.8, top-k off, top-p 0.9, seed 0, 3 samples, prompt 'k'"
    assert view["text/plain"] == f"SamplingPlayground ({settings}):\n" + ", ".join(playground.names)
    shown = ", ".join(f"<b>k</b>{html.escape(name[1:])}" for name in playground.names)
    assert view["text/html"] == (
        f"<p><small>Static view · SamplingPlayground: {html.escape(settings)}</small><br>"
        f"<code>{shown}</code></p>"
    )
    assert playground.static_view_metadata() == {
        "tfscratch": {"static_view_of": "SamplingPlayground", "error": None}
    }
    no_prompt = SamplingPlayground(model, tokenizer, n=2)
    assert "<b>" not in no_prompt.static_view()["text/html"]  # nothing to bold
    assert ", ".join(map(html.escape, no_prompt.names)) in no_prompt.static_view()["text/html"]


def test_playground_static_view_shows_an_error_and_flags_it(model, tokenizer):
    playground = SamplingPlayground(model, tokenizer, n=2)
    playground.prompt.value = "K!"
    view = playground.static_view()
    assert "error: prompt='K!' cannot be encoded" in view["text/plain"]
    assert "prompt=&#x27;K!&#x27; cannot be encoded" in view["text/html"]
    assert "<code>" not in view["text/html"]  # no stale names beside the error
    assert playground.static_view_metadata()["tfscratch"]["error"] == playground.error
    playground.prompt.value = "k"
    assert playground.static_view_metadata()["tfscratch"]["error"] is None


def test_explorer_static_view_is_the_heatmap_and_the_weights(model, tokenizer):
    explorer = AttentionExplorer(model, tokenizer, ["emma"], layer=1, head=2)
    view = explorer.static_view()
    assert base64.b64decode(view["image/png"]) == bytes(explorer.image.value)
    title, header, *rows = view["text/plain"].splitlines()
    assert title.startswith("AttentionExplorer: layer 1, head 2, 'emma'")
    assert header.split() == ["<bos>", "e", "m", "m", "a"]
    assert [row.split()[0] for row in rows] == ["<bos>", "e", "m", "m", "a"]
    for i, row in enumerate(rows):  # row i: query i over keys 0..i, the future left blank
        shown = [float(value) for value in row.split()[1:]]
        np.testing.assert_allclose(shown, explorer.weights[i, : i + 1], atol=0.005)


class FakeHandle:
    """Stands in for IPython's DisplayHandle: records what each update sent."""

    def __init__(self, sent):
        self.sent = sent

    def update(self, data, metadata=None, raw=False):
        self.sent.append(("update", data, metadata))


@pytest.fixture
def displayed(monkeypatch):
    """Replace IPython's display in tfscratch.widgets; return the list of what it was sent."""
    sent = []

    def fake_display(data, metadata=None, raw=False, display_id=None):
        assert raw  # bundles are sent as they are, not formatted again
        sent.append(("display", data, metadata))
        return FakeHandle(sent) if display_id else None

    monkeypatch.setattr(tfscratch.widgets, "display", fake_display)
    return sent


WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"


@pytest.mark.parametrize("kind", ["playground", "explorer"])
def test_displaying_a_widget_makes_one_output_with_its_static_view_beside_it(
    model, tokenizer, displayed, kind
):
    """One output, one mimebundle: JupyterLab renders the widget view and only it; GitHub and
    nbviewer, which cannot, fall back to the static view's HTML or PNG in the same bundle."""
    if kind == "playground":
        widget = SamplingPlayground(model, tokenizer, n=2)
    else:
        widget = AttentionExplorer(model, tokenizer, ["emma"])
    widget._ipython_display_()
    ((_, bundle, metadata),) = displayed  # not a second output below the widget
    assert bundle[WIDGET_VIEW]["model_id"] == widget.model_id
    static = widget.static_view()
    assert {mime: bundle[mime] for mime in static} == static
    assert set(static) & {"text/html", "image/png"}
    assert bundle["text/plain"] == static["text/plain"]  # the state, not a cut-off repr
    assert metadata == widget.static_view_metadata()
    assert widget._repr_mimebundle_() == bundle  # display(widget) and the formatter agree


def test_the_static_view_follows_every_update(model, tokenizer, displayed):
    explorer = AttentionExplorer(model, tokenizer, ["emma", "olivia"])
    explorer._ipython_display_()
    explorer._ipython_display_()  # shown twice: both places follow
    del displayed[:]
    explorer.example.value = "olivia"  # a dropdown change calls update()
    assert [kind for kind, _, _ in displayed] == ["update", "update"]
    assert displayed[-1][1] == {**explorer._repr_mimebundle_(), **explorer.static_view()}
    assert WIDGET_VIEW in displayed[-1][1]  # the refreshed output is still the widget
    assert "'olivia'" in displayed[-1][1]["text/plain"]
    assert displayed[-1][2] == explorer.static_view_metadata()


class FakeKernel:
    def __init__(self, msg_type):
        self.msg_type = msg_type

    def get_parent(self):
        return {"header": {"msg_type": self.msg_type}}


class FakeShell:
    def __init__(self, msg_type):
        self.kernel = FakeKernel(msg_type)


def test_a_change_made_in_the_frontend_is_not_sent_back(model, tokenizer, displayed, monkeypatch):
    """A learner's slider move reaches the kernel as a comm message: the live widget already
    shows it, and a re-sent bundle would make JupyterLab draw the widget anew under the
    learner's hand. A change made by code (a cell being run) refreshes the stored view."""
    playground = SamplingPlayground(model, tokenizer, n=2)
    playground._ipython_display_()
    del displayed[:]
    monkeypatch.setattr(tfscratch.widgets, "get_ipython", lambda: FakeShell("comm_msg"))
    playground.seed.value = 5
    assert displayed == [] and playground.names == sample_names(model, tokenizer, seed=5, n=2)
    monkeypatch.setattr(tfscratch.widgets, "get_ipython", lambda: FakeShell("execute_request"))
    playground.seed.value = 6
    assert [kind for kind, _, _ in displayed] == ["update"]


def test_a_widget_never_displayed_refreshes_nothing(model, tokenizer, displayed):
    SamplingPlayground(model, tokenizer, n=2).update()
    assert displayed == []


def test_every_widget_of_the_package_has_a_static_view():
    boxes = [
        cls
        for _, cls in inspect.getmembers(tfscratch.widgets, inspect.isclass)
        if cls.__module__ == "tfscratch.widgets"
        and issubclass(cls, tfscratch.widgets.widgets.Widget)
    ]
    assert {cls.__name__ for cls in boxes} >= {"SamplingPlayground", "AttentionExplorer"}
    for cls in boxes:
        assert issubclass(cls, StaticViewBox), cls.__name__
        if cls is not StaticViewBox:
            assert cls.static_view is not StaticViewBox.static_view, cls.__name__


def test_nothing_in_the_package_imports_the_widgets():
    """widgets is the top of the import graph: presentation, never a dependency."""
    package = Path(tfscratch.__file__).parent
    importers = [
        path.name
        for path in package.glob("*.py")
        if path.name != "widgets.py"
        and re.search(
            r"^\s*(from\s+(\.|tfscratch\.?)\s*(import\s+)?widgets|import\s+tfscratch\.widgets)",
            path.read_text(),
            re.MULTILINE,
        )
    ]
    assert importers == []
