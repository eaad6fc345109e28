"""The package runs the maths the notebooks teach, in one place, with no hidden side effects.

These tests pin the structure issue "One maths" asks for: attention goes through
``functional.scaled_dot_product_attention`` and its backward, the fused Q/K/V weight is the
three projections' memory (not a copy), the package imports in layers without cycles, and
``import tfscratch`` changes nothing outside the package.
"""

import ast
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import tfscratch
from tfscratch import functional as F
from tfscratch import gradcheck, nn
from tfscratch.module import evaluating

from .conftest import GRAD_TOL, randomize

PACKAGE = Path(tfscratch.__file__).parent


# --- attention calls the function notebook 04 teaches ------------------------------------
def test_multi_head_attention_runs_scaled_dot_product_attention_and_its_backward(monkeypatch, rng):
    """In its two halves (the weights, then the weighted values), with the pattern's hook
    point between them; scaled_dot_product_attention is exactly those halves."""
    calls = []
    halves = ("attention_weights", "attend", "attend_backward", "attention_weights_backward")

    def spy(name, function):
        def spied(*args, **kwargs):
            calls.append(name)
            return function(*args, **kwargs)

        return spied

    for name in halves:
        monkeypatch.setattr(F, name, spy(name, getattr(F, name)))
    mha = nn.MultiHeadAttention(8, 2, seed=0)
    out = mha(np.ones((1, 3, 8), np.float32), is_causal=True)
    mha.backward(np.ones_like(out))
    assert calls == list(halves)
    calls.clear()
    q, k, v = (rng.standard_normal((2, 2, 4, 3)) for _ in range(3))
    mask, dropout_mask = F.causal_mask(4), rng.uniform(0, 2, (2, 2, 4, 4))
    out, weights = F.scaled_dot_product_attention(q, k, v, mask, dropout_mask)
    F.scaled_dot_product_attention_backward(out, q, k, v, weights, dropout_mask)
    assert calls == list(halves)


def test_multi_head_attention_equals_split_attend_merge_by_hand(rng):
    """Notebook 05's recipe, written out: project, split_heads, attend, merge_heads, out_proj."""
    mha = randomize(nn.MultiHeadAttention(8, 2, seed=0, dtype=np.float64))
    x = rng.standard_normal((2, 5, 8))
    q, k, v = (x @ p.weight.data + p.bias.data for p in (mha.q_proj, mha.k_proj, mha.v_proj))
    heads, weights = F.scaled_dot_product_attention(
        *(nn.split_heads(t, 2) for t in (q, k, v)), mask=F.causal_mask(5)
    )
    expected = nn.merge_heads(heads) @ mha.out_proj.weight.data + mha.out_proj.bias.data
    np.testing.assert_allclose(mha(x, is_causal=True), expected, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(mha.attn_weights, weights, rtol=1e-12, atol=1e-15)


@pytest.mark.parametrize("masked", [False, True])
def test_attention_with_dropout_on_the_weights_matches_finite_differences(rng, masked):
    q, k, v = (rng.standard_normal((2, 2, 4, 3)) for _ in range(3))
    keep = F.dropout_mask((2, 2, 4, 4), 0.4, np.random.default_rng(0), dtype=np.float64)
    mask = F.causal_mask(4) if masked else None
    out, weights = F.scaled_dot_product_attention(q, k, v, mask, dropout_mask=keep)
    np.testing.assert_allclose(out, (weights * keep) @ v, rtol=1e-12)
    assert (weights.sum(-1) > 0.999).all()  # the weights are returned before dropout

    def forward(q_, k_, v_):
        return F.scaled_dot_product_attention(q_, k_, v_, mask, dropout_mask=keep)[0]

    def backward(grad):
        return F.scaled_dot_product_attention_backward(grad, q, k, v, weights, dropout_mask=keep)

    assert gradcheck(forward, q, k, v, backward=backward) < GRAD_TOL


# --- one matmul for Q, K and V --------------------------------------------------------------
@pytest.mark.parametrize("bias", [True, False])
def test_projecting_together_equals_the_separate_linear_maps_forward_and_backward(rng, bias):
    """Notebook 05's fused Q/K/V: x @ [W_q | W_k | W_v] split in three is q_proj(x), k_proj(x),
    v_proj(x), and its backward gives each map the gradient its own backward would."""
    from tfscratch.attention import project_together, project_together_backward

    fused = [nn.Linear(6, 6, bias, seed=i, dtype=np.float64) for i in range(3)]
    separate = [nn.Linear(6, 6, bias, seed=i, dtype=np.float64) for i in range(3)]
    x = rng.standard_normal((2, 5, 6))
    grads = [rng.standard_normal((2, 5, 6)) for _ in range(3)]
    for together, alone in zip(project_together(x, fused), [lin(x) for lin in separate]):
        np.testing.assert_allclose(together, alone, rtol=1e-13, atol=1e-13)
    dx = project_together_backward(x, grads, fused)
    dx_separate = sum(lin.backward(g) for lin, g in zip(separate, grads))
    np.testing.assert_allclose(dx, dx_separate, rtol=1e-12, atol=1e-12)
    for a, b in zip(fused, separate):
        for name, p in a.named_parameters().items():
            np.testing.assert_allclose(
                p.grad, b.named_parameters()[name].grad, rtol=1e-12, atol=1e-12
            )


# --- one form per function; where the arithmetic is not the textbook's, it equals it --------
def test_the_gelu_gate_through_exp_and_its_derivative_equal_the_tanh_formulas(rng):
    """Notebook 03 derives both: the gate (1 + tanh u) / 2 is sigmoid(2u), and the derivative
    written through the gate (1 - tanh^2 u = 4 s (1 - s)) is the derivative as first written."""
    x = rng.standard_normal(1000) * 4
    u = np.sqrt(2 / np.pi) * (x + 0.044715 * x**3)
    t = np.tanh(u)
    du_dx = np.sqrt(2 / np.pi) * (1 + 3 * 0.044715 * x**2)
    np.testing.assert_allclose(F.tanh_gelu_gate(x), 0.5 * (1 + t), rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(F.gelu(x), 0.5 * x * (1 + t), rtol=1e-12, atol=1e-15)
    textbook = 0.5 * (1 + t) + 0.5 * x * (1 - t**2) * du_dx
    np.testing.assert_allclose(
        F.gelu_backward(np.ones_like(x), x), textbook, rtol=1e-10, atol=1e-14
    )


@pytest.mark.parametrize("shape", [(3,), (2, 5), (1, 1, 64), (32, 4, 32, 32)])
def test_row_sums_equal_numpys_sums(rng, shape):
    x, y = (rng.standard_normal(shape).astype(np.float32) for _ in range(2))
    np.testing.assert_allclose(F.row_sum(x), x.sum(axis=-1, keepdims=True), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(
        F.row_dot(x, y), (x * y).sum(axis=-1, keepdims=True), rtol=1e-5, atol=1e-5
    )


def test_functional_chooses_no_formula_by_array_size():
    source = (PACKAGE / "functional.py").read_text()
    assert "EINSUM_FROM_SIZE" not in source and ".size <" not in source


def test_softmax_out_argument_writes_in_place(rng):
    """Attention turns its scores into weights in the same array (notebook 13 measures it)."""
    scores = rng.standard_normal((3, 5))
    expected = np.exp(scores) / np.exp(scores).sum(-1, keepdims=True)
    result = F.softmax(scores, out=scores)
    assert result is scores
    np.testing.assert_allclose(scores, expected, rtol=1e-12)


# --- modes ---------------------------------------------------------------------------------
def test_evaluating_restores_the_previous_mode_even_after_an_error():
    model = nn.FeedForward(4, 8, dropout=0.5, seed=0)
    with pytest.raises(RuntimeError), evaluating(model):
        assert not model.dropout.training
        raise RuntimeError("boom")
    assert model.training and model.dropout.training
    model.eval()
    with evaluating(model):
        pass
    assert not model.training


# --- the import graph ------------------------------------------------------------------------
def _module_name(path: Path) -> str:
    """``tfscratch/tokenizers/bpe.py`` -> ``tokenizers.bpe``; a package's ``__init__.py`` is
    the package (the top one: ``__init__``)."""
    parts = [part for part in path.relative_to(PACKAGE).with_suffix("").parts]
    return ".".join(part for part in parts if part != "__init__") or "__init__"


def _package_imports() -> dict[str, set[str]]:
    """Module -> the tfscratch modules it imports (at any depth of the file), sub-packages
    included (``tokenizers.base``)."""
    graph = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        package = list(path.relative_to(PACKAGE).parts[:-1])  # where `from .x` looks
        imported = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.level >= 1:
                base = package[: len(package) - (node.level - 1)]
                if node.module:
                    imported.add(".".join([*base, *node.module.split(".")]))
                else:
                    imported.update(".".join([*base, alias.name]) for alias in node.names)
        graph[_module_name(path)] = imported
    return graph


def test_the_package_has_no_import_cycles():
    graph = _package_imports()
    state = {}

    def visit(module, stack):
        state[module] = "visiting"
        for target in graph.get(module, ()):
            if state.get(target) == "visiting":
                pytest.fail(f"import cycle: {' -> '.join(stack + [module, target])}")
            if target not in state:
                visit(target, stack + [module])
        state[module] = "done"

    for module in graph:
        if module not in state:
            visit(module, [])


def test_no_module_imports_another_modules_private_name():
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.level >= 1:
                private = [a.name for a in node.names if a.name.startswith("_")]
                assert not private, f"{path.name} imports {private} from .{node.module}"


CORE = ("functional", "checks", "module", "layers", "positional", "attention", "blocks", "models")


@pytest.mark.parametrize("module", CORE)
def test_the_numerical_core_imports_only_numpy(module):
    tree = ast.parse((PACKAGE / f"{module}.py").read_text())
    outside = {
        alias.name.split(".")[0]
        for node in ast.walk(tree)
        if isinstance(node, ast.Import)
        for alias in node.names
    } | {
        node.module.split(".")[0]
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module != "__future__"
    }
    # scipy's erf is imported inside the exact GELU only (see functional._standard_normal_cdf)
    allowed = {"numpy", "scipy"} | set(sys.stdlib_module_names)
    assert outside <= allowed, f"{module} imports {outside - allowed}"


def test_import_tfscratch_changes_nothing_outside_the_package():
    """No allocator setting, no global random state, no warning filter at import."""
    probe = """
import ctypes, warnings, numpy as np
looked_up = []
class Spy(ctypes.CDLL):
    def __getattr__(self, name):
        looked_up.append(name)
        return super().__getattr__(name)
ctypes.CDLL = Spy
state = np.random.get_state()[1].copy()
filters = list(warnings.filters)
import tfscratch, tfscratch.data, tfscratch.train
assert "mallopt" not in looked_up, looked_up
assert (np.random.get_state()[1] == state).all()
assert warnings.filters == filters
print("clean")
"""
    result = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=False
    )
    assert result.stdout.strip() == "clean", result.stderr


def test_no_top_level_function_shadows_a_module_of_the_same_name():
    """``tfscratch.generate`` is the function, and the module it lives in has another name
    (``tfscratch.generation``), so ``tfscratch.generation.filter_logits`` works and nothing
    named ``tfscratch.X`` is a module one moment and a function the next."""
    import pkgutil

    modules = {info.name for info in pkgutil.iter_modules(tfscratch.__path__)}
    functions = {name for name in tfscratch.__all__ if callable(getattr(tfscratch, name))}
    assert not modules & functions, modules & functions
    assert callable(tfscratch.generation.filter_logits) and callable(tfscratch.generate)
