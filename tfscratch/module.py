"""The module protocol: ``Parameter`` and ``Module``.

Every layer in tfscratch is a ``Module`` with an explicit ``forward`` and ``backward``:

* ``forward(*inputs, **options)`` computes the output and keeps, on ``self``, exactly what
  ``backward`` will need (named after what it holds: ``self._x_hat``, not ``self.c1``).
* ``backward(grad_output)`` returns the gradient with respect to the input(s) and
  *accumulates* (``+=``) the gradient of every parameter into ``parameter.grad``.

There is no autograd tape of operations: each backward is written next to its forward,
micrograd-style, so the chain rule is visible line by line. What ``module(x)`` does add is a
small record per call of what that forward kept, so that a backward always runs on the cache
of the forward it belongs to:

* a module used twice in one forward (weight sharing by reuse: the same layer, the same block
  twice in a stack) keeps two records, and its two backwards (called in reverse order, as the
  chain rule calls them) each get their own, so the gradients add up right;
* a second ``backward`` for one forward raises (it would add the gradients twice; PyTorch
  raises too);
* a model called again on other values before the backward of its previous forward
  (printing another batch's logits, a validation forward outside ``no_grad()``) keeps only
  the newest forward, so its backward raises when the gradient's shape fits both outputs:
  which forward the gradient belongs to cannot be known, and the newest one is the wrong
  guess as often as not. Called again on the same input (a cell that shows the output, then
  one that runs forward and backward), it keeps the same caches, and the backward is right
  either way (with dropout active the caches differ); a gradient shaped like the newest
  output only belongs to the newest forward;
* the same holds for a layer of a model called on its own, on other values, between the
  model's forward and its backward (a look inside): the model's backward raises when it
  reaches that layer with a gradient that fits both;
* a forward inside ``no_grad()`` keeps nothing and drops what earlier forwards kept, so a
  backward after it raises (it cannot be for the newest forward, and going back through an
  older one could be silently wrong).

``with no_grad():`` (as PyTorch's ``torch.no_grad``) runs forwards that keep nothing for a
backward: generation, translation and evaluation use it, so they hold no memory for a
backward that never comes.
"""

from __future__ import annotations

import functools
import inspect
import threading
from collections.abc import Iterator
from contextlib import ContextDecorator, contextmanager

import numpy as np


def make_rng(
    seed: int | None = None, rng: np.random.Generator | None = None
) -> np.random.Generator:
    """The random generator a constructor should draw from.

    Pass ``rng`` to share one stream between modules (a model hands its generator to each
    submodule in turn, so one seed fixes every weight), or ``seed`` for a fresh stream.
    NumPy's global random state is never touched.

    Args:
        seed: an int seed, or None.
        rng: a ``numpy.random.Generator`` to share, or None (not both).

    Returns:
        ``rng`` itself, or ``np.random.default_rng(seed)``.
    """
    if rng is not None and seed is not None:
        raise ValueError(f"give seed or rng, not both (seed={seed!r}, rng={rng!r})")
    if rng is not None:
        if not isinstance(rng, np.random.Generator):
            raise TypeError(f"rng must be a numpy.random.Generator, got {type(rng).__name__}")
        return rng
    if seed is not None and not isinstance(seed, (int, np.integer)):
        raise TypeError(f"seed must be an int or None, got {seed!r}")
    return np.random.default_rng(seed)


def check_dtype(dtype) -> np.dtype:
    """Float dtype used for parameters and activations (float32 by default).

    Args:
        dtype: anything ``np.dtype`` accepts.

    Returns:
        ``np.dtype('float32')`` or ``np.dtype('float64')``; any other raises ``TypeError``.
    """
    dtype = np.dtype(dtype)
    if dtype not in (np.float32, np.float64):
        raise TypeError(f"dtype must be float32 or float64, got {dtype}")
    return dtype


class Parameter:
    """A trainable array with its gradient.

    Attributes:
        data: the values, any shape; a float32 or float64 array that this parameter owns
            (contiguous, shared with no other parameter). Assigning a new array, as a
            hand-written optimiser does (``p.data = p.data - lr * p.grad``), copies it in
            with the parameter's own dtype; an array of another shape raises ``ValueError``.
        grad: same shape and dtype as ``data``; ``backward`` passes add into it and
            ``zero_grad`` resets it. Assigning works as for ``data`` (None means zeros).
        requires_grad: True (the default) for a parameter that trains. A *frozen* parameter
            (False, as ``Module.freeze()`` sets it) receives no gradient: its ``grad`` reads
            as zeros of its shape and dtype, and whatever a backward adds to it (``p.grad +=
            g``) or assigns to it is discarded (shapes are still checked), so
            ``clip_grad_norm`` and a hand-written ``p.data -= lr * p.grad`` leave it as it is;
            every optimiser skips it. Freezing sets the stored gradient to zeros, so a
            parameter unfrozen later starts from a zero gradient. Its values are still part of
            ``state_dict`` and ``load_state_dict``. (PyTorch's frozen ``.grad`` is ``None``;
            here it is zeros, so code that reads ``p.grad`` never needs a special case.)

    The forward of every layer reads ``parameter.data`` at the time it runs, so whatever
    you assign is what the model computes with.

    Args:
        data: the initial values, a float array (copied).
        requires_grad: False to create it frozen.
    """

    def __init__(self, data: np.ndarray, requires_grad: bool = True):
        data = np.asarray(data)
        if not np.issubdtype(data.dtype, np.floating):
            raise TypeError(f"Parameter data must be a float array, got dtype {data.dtype}")
        self._data = np.array(data, order="C")  # a copy this parameter owns
        self._grad = np.zeros_like(self._data)
        self.requires_grad = requires_grad

    @property
    def requires_grad(self) -> bool:
        return self._requires_grad

    @requires_grad.setter
    def requires_grad(self, value: bool) -> None:
        if not isinstance(value, (bool, np.bool_)):
            raise TypeError(f"requires_grad must be True or False, got {value!r}")
        self._requires_grad = bool(value)
        if not value:
            self._grad[...] = 0  # a frozen parameter holds no gradient

    @property
    def data(self) -> np.ndarray:
        return self._data

    @data.setter
    def data(self, value) -> None:
        if value is not self._data:  # `p.data -= step` updates in place, then lands here
            self._data = self._own_copy(value, "data")

    @property
    def grad(self) -> np.ndarray:
        if not self._requires_grad:  # frozen: a fresh zero array, so `+=` into it is discarded
            return np.zeros_like(self._data)
        return self._grad

    @grad.setter
    def grad(self, value) -> None:
        if value is None:  # as PyTorch's `p.grad = None`: start again from zero
            value = np.zeros_like(self._data)
        if not self._requires_grad:  # frozen: check the shape, keep nothing
            self._own_copy(value, "grad")
            return
        if value is not self._grad:  # `p.grad += g` adds in place, then lands here
            self._grad = self._own_copy(value, "grad")

    def _own_copy(self, value, name: str) -> np.ndarray:
        """``value`` as a new contiguous array of this parameter's shape and dtype."""
        array = np.asarray(value)
        if array.shape != self._data.shape:
            raise ValueError(
                f"Parameter.{name} must keep the shape {self._data.shape}; got an array of "
                f"shape {array.shape} (a new shape needs a new layer)"
            )
        if not (np.issubdtype(array.dtype, np.floating) or np.issubdtype(array.dtype, np.integer)):
            raise TypeError(f"Parameter.{name} must be a numeric array, got dtype {array.dtype}")
        # keeps float32 float32 even when the update was computed in float64
        return np.array(array, dtype=self._data.dtype, order="C")

    @property
    def shape(self) -> tuple[int, ...]:
        return self._data.shape

    def zero_grad(self) -> None:
        """Set ``grad`` to zeros, in place."""
        self._grad[...] = 0

    def __repr__(self) -> str:
        frozen = "" if self._requires_grad else ", requires_grad=False"
        return f"Parameter(shape={self._data.shape}, dtype={self._data.dtype}{frozen})"


# --- no_grad: forwards that keep nothing for a backward ---------------------------------------
class _GradMode(threading.local):
    """Grad mode per thread, as PyTorch's: a ``no_grad()`` in one thread leaves another's
    forwards keeping their caches."""

    enabled = True


_grad_mode = _GradMode()


class _Depth(threading.local):
    """How many ``module(x)`` calls (and backwards) are running in this thread: a call at
    depth 0 is one the learner made (a whole model, or a layer on its own), not one from
    inside a forward."""

    forward = 0
    backward = 0


_depth = _Depth()


class _Records:
    """A module's records of its forwards kept for a backward (see the module docstring).

    Attributes:
        kept: one ``(attributes, output shape)`` pair per forward not yet back-propagated,
            oldest first: every attribute that forward assigned (``self._x_hat = ...``), put
            back before the backward of that forward, and the shape of what it returned.
        filling: the dict the running forward assigns into, or None outside a forward.
        replaced: when this module's last call made at the top kept other values than the
            records it dropped (here or in a module under it), the output shapes of this
            module's own dropped forwards: a backward might be meant for one of them.
        spent: the last kept forward has had its backward.
        after_no_grad: the last call made at the top of this module (or of a model holding
            it) ran inside ``no_grad()``: it kept nothing, and the forwards before it were
            dropped, so a backward now raises instead of going back through an older one.
        in_backward: the module's backward is running (a subclass's ``super().backward``
            then runs on the same record).
    """

    def __init__(self):
        self.kept: list[tuple] = []
        self.filling: dict | None = None
        self.replaced: list[tuple] = []
        self.spent = False
        self.in_backward = False
        self.after_no_grad = False


def is_grad_enabled() -> bool:
    """False inside ``with no_grad():``, where forwards keep nothing for a backward."""
    return _grad_mode.enabled


class no_grad(ContextDecorator):  # lower case: named as PyTorch's torch.no_grad
    """``with tfscratch.no_grad():`` runs forwards that keep nothing for ``backward``.

    Inside it every module's forward computes its output as usual (and attention still sets
    ``.attn_weights``) but keeps no cache, and a ``backward`` raises a clear error. Use it to
    evaluate, generate or look at a model: memory then holds only what the forward needs
    while it runs. Also a decorator (``@no_grad()``), of generator functions too (each step
    of the generator runs without grad, the caller's code between steps with its own mode);
    nested blocks restore the mode they found, also when the block raises. The mode is per
    thread.
    """

    def __init__(self):
        self._previous: list[bool] = []  # a stack, so one instance may be re-entered

    def __enter__(self):
        self._previous.append(_grad_mode.enabled)
        _grad_mode.enabled = False
        return self

    def __exit__(self, *exc_info) -> None:
        _grad_mode.enabled = self._previous.pop()

    def __call__(self, function):
        if not inspect.isgeneratorfunction(function):
            return super().__call__(function)

        @functools.wraps(function)
        def generator(*args, **kwargs):
            steps, sent = function(*args, **kwargs), None
            while True:
                try:
                    with no_grad():
                        value = steps.send(sent)
                except StopIteration as stop:
                    return stop.value
                sent = yield value

        return generator


class Module:
    """Base class of every layer and model.

    Submodules and parameters are found by looking at the instance's attributes, in the
    order they were assigned: a ``Parameter`` or a ``Module``, also inside a list or tuple
    (named ``blocks.0``, ``blocks.1``, ...) or as a value of a dict (``heads.left``), as
    PyTorch's ``ModuleList``/``ModuleDict``/``ParameterList`` would hold them. Attributes
    whose names start with ``_`` are private state (forward caches) and are never visited,
    so assigning a ``Module`` or ``Parameter`` to such a name is refused: it would silently
    not be trained.
    """

    training: bool = True
    # None: no forward yet; True: the last forward kept what backward needs; False: it ran
    # inside no_grad() and kept nothing.
    _ready_for_backward: bool | None = None

    def __setattr__(self, name: str, value) -> None:
        if name.startswith("_") and _holds_weights(value):
            raise AttributeError(
                f"{type(self).__name__}.{name}: a Module or Parameter under a name that starts "
                f"with '_' is private state, never found by parameters(), state_dict() or an "
                f"optimiser, so it would not train; name it without the underscore "
                f"(self.{name.lstrip('_')} = ...)"
            )
        object.__setattr__(self, name, value)
        records = vars(self).get("_records")
        if records is not None and not records.in_backward:
            if records.filling is not None:
                records.filling[name] = value  # what this call's forward kept
            elif _grad_mode.enabled:
                records.spent = records.after_no_grad = False  # a direct .forward() keeping a cache

    def __init_subclass__(cls, **kwargs):
        """Each layer's own ``backward`` first puts back what its forward kept (below)."""
        super().__init_subclass__(**kwargs)
        if "backward" in vars(cls):
            cls.backward = _on_its_forward(vars(cls)["backward"])

    def __call__(self, *inputs, **options):
        """``module(x)`` is ``module.forward(x)``, looked up on the instance, so a forward
        you wrap or replace (``layer.forward = watch(layer.forward)``) is the one called.

        Outside ``no_grad()`` it also records what this forward assigned to ``self`` (its
        cache), for the backward of this call; see the module docstring. A call made at the
        top (not from inside another module's forward) first drops the records of forwards
        whose backward never came, in this module and every module under it."""
        if not _grad_mode.enabled:
            at_the_top = _depth.forward == 0
            _depth.forward += 1
            try:
                output = self.forward(*inputs, **options)
            finally:
                _depth.forward -= 1
            self._ready_for_backward = False
            if at_the_top:
                self._keep_nothing_after_no_grad()
            return output
        records = vars(self).get("_records")
        if records is None:
            records = self._records = _Records()
        dropped = self._drop_kept_forwards() if _depth.forward == 0 else {}
        outer, records.filling = records.filling, {}
        _depth.forward += 1
        try:
            output = self.forward(*inputs, **options)
            shape = np.shape(output[0] if isinstance(output, tuple) else output)
            records.kept.append((records.filling, shape))
        finally:
            _depth.forward -= 1
            records.filling = outer
        if any(dropped.values()) and not _kept_the_same(dropped):
            records.replaced = [shape for _, shape in dropped[self]]  # might be meant instead
        records.spent = False
        self._ready_for_backward = True
        return output

    def _drop_kept_forwards(self) -> dict:
        """Before a call the learner makes: drop the records kept in this module and every
        module under it, and return them, ``{module: [(attributes, shape), ...]}``, to be
        compared with what this call keeps."""
        dropped = {}
        for module in self.modules():
            records = vars(module).get("_records")
            if records is not None:
                dropped[module], records.kept, records.replaced = records.kept, [], []
                records.after_no_grad = False
        return dropped

    def _keep_nothing_after_no_grad(self) -> None:
        """After a call made at the top inside ``no_grad()``: drop what earlier forwards kept,
        here and in every module under it, and mark them so that a backward raises (the
        learner's backward is meant for the newest forward, which kept nothing; going back
        through an older one would be silently wrong). A model called again and again inside
        ``no_grad()`` (generation) walks its modules only the first time."""
        records = vars(self).get("_records")
        if records is not None and records.after_no_grad and not records.kept:
            return
        for module in self.modules():
            records = vars(module).get("_records")
            if records is None:
                records = module._records = _Records()
            records.kept.clear()
            records.replaced = []
            records.after_no_grad = True

    def forget_forwards(self) -> None:
        """Drop what earlier forwards kept for a backward that will not come, here and in
        every module under it (``train`` starts with it: a forward run to look at the model
        before training is not an error)."""
        for module in self.modules():
            if "_records" in vars(module):
                module._records.kept.clear()
                module._records.replaced = []

    def _restore_forward(self, grads: tuple) -> tuple | None:
        """Put back what the forward this backward belongs to kept, and return that record;
        raise when that forward is gone or cannot be told (see the module docstring).

        Args:
            grads: the gradients backward was given (the first one's shape tells a forward
                whose output it fits from one whose output it does not).
        """
        records = self._records
        name = type(self).__name__
        if records.after_no_grad:
            raise RuntimeError(
                f"{name}.backward: the last forward ran inside no_grad(), which keeps nothing "
                "for a backward (and drops what earlier forwards kept); run the forward whose "
                "loss you differentiate again, outside `with no_grad():`, right before backward"
            )
        if records.replaced:
            shape = np.shape(grads[0]) if grads else None
            fits = [old for old in records.replaced if shape is None or old == shape]
            records.replaced = []
            if fits:
                raise RuntimeError(
                    f"{name}.backward: this module ran another forward, on other values, "
                    "after the one before it (called on its own, or inside another model) and "
                    "kept only the newest; your gradient fits either output, so which forward "
                    "it belongs to cannot be known. Run the "
                    "forward whose loss you differentiate right before backward, and wrap the "
                    "other forwards (evaluation, printing) in `with no_grad():`"
                )
        if records.spent:
            raise RuntimeError(
                f"{name}.backward was called twice for one forward: a second backward would "
                "add every gradient again (PyTorch raises here too). Run the forward again "
                "first (and zero the gradients if you meant to start over)"
            )
        if not records.kept:  # forward was called directly: its cache is what self holds
            return None
        record = records.kept.pop()
        vars(self).update(record[0])
        return record

    def forward(self, *inputs, **options):  # pragma: no cover - abstract
        """Compute the output and keep what ``backward`` needs (each layer defines it).

        Args:
            inputs: the layer's input arrays; options: its keyword options.

        Returns:
            the output.
        """
        raise NotImplementedError

    def backward(self, grad_output):  # pragma: no cover - abstract
        """Accumulate (``+=``) every parameter's gradient (each layer defines it).

        Args:
            grad_output: dL/d(output), the shape of the last forward's output.

        Returns:
            dL/d(input): one array, a tuple for several array inputs, None for integer ids.
        """
        raise NotImplementedError

    # --- what forward keeps for backward ------------------------------------------------
    def save_for_backward(self, **arrays) -> None:
        """Keep what ``backward`` will need, as ``self._<name>`` (cs231n's cache).

        ``self.save_for_backward(x=x)`` sets ``self._x``. Inside :class:`no_grad` nothing is
        kept: each name is set to None, which also frees what an earlier forward kept.

        Args:
            arrays: ``name=value`` pairs to keep.
        """
        if _grad_mode.enabled:
            for name, value in arrays.items():
                setattr(self, f"_{name}", value)
            self._ready_for_backward = True
            if "_records" in vars(self):
                self._records.spent = False
        elif self._ready_for_backward is not False:  # once dropped, there is nothing to drop
            vars(self).update(dict.fromkeys(f"_{name}" for name in arrays))
            self._ready_for_backward = False

    def check_grad_shape(self, grad_output, expected_shape: tuple) -> None:
        """Raise a clear ``ValueError`` when ``grad_output`` is not shaped like the last
        forward's output (instead of a NumPy broadcasting error deep in the backward).

        Args:
            grad_output: the gradient ``backward`` was given.
            expected_shape: the last forward's output shape.
        """
        if np.shape(grad_output) != tuple(expected_shape):
            raise ValueError(
                f"{type(self).__name__}.backward: grad_output has shape {np.shape(grad_output)}; "
                f"expected {tuple(expected_shape)}, the shape of the last forward's output"
            )

    def check_ready_for_backward(self) -> None:
        """Raise a clear error when no forward has kept what ``backward`` needs."""
        if self._ready_for_backward:
            return
        name = type(self).__name__
        if self._ready_for_backward is None:
            raise RuntimeError(
                f"{name}.backward was called before any forward: run the forward first, as "
                f"layer(x) (which records it) or layer.forward(x) with save_for_backward(...)"
            )
        raise RuntimeError(
            f"{name}.backward: the last forward ran inside no_grad(), which keeps nothing for a "
            "backward; run the forward again outside `with no_grad():`"
        )

    # --- walking the tree -------------------------------------------------------------
    def named_children(self) -> Iterator[tuple[str, Module]]:
        """The direct submodules: ``(name, module)``; a list's items as ``name.0``,
        ``name.1``, a dict's as ``name.key``."""
        for name, value in self._public_items():
            if isinstance(value, Module):
                yield name, value

    def _public_items(self) -> Iterator[tuple[str, object]]:
        """Every public attribute, with the items of lists, tuples and dicts under dotted
        names (``None`` items, a layer switched off, are skipped)."""
        for name, value in vars(self).items():
            if name.startswith("_"):
                continue
            if isinstance(value, (list, tuple)):
                yield from ((f"{name}.{index}", item) for index, item in enumerate(value))
            elif isinstance(value, dict) and value and _holds_weights(value):
                yield from ((f"{name}.{key}", item) for key, item in value.items())
            else:
                yield name, value

    def named_parameters(self, prefix: str = "") -> dict[str, Parameter]:
        """Every parameter under a dotted name, e.g. ``blocks.0.attn.q_proj.weight``.

        A parameter shared by two modules (weight tying) is listed once, under its first name.

        Args:
            prefix: put in front of every name.

        Returns:
            dict of name -> :class:`Parameter`: the module's own parameters first, then each
            submodule's, each group in the order its attributes were assigned.
        """
        found: dict[str, Parameter] = {}
        seen: set[int] = set()
        self._collect_parameters(prefix, found, seen)
        return found

    def _collect_parameters(self, prefix: str, found: dict, seen: set) -> None:
        for name, value in self._public_items():
            if isinstance(value, Parameter) and id(value) not in seen:
                seen.add(id(value))
                found[prefix + name] = value
        for name, child in self.named_children():
            child._collect_parameters(f"{prefix}{name}.", found, seen)

    def parameters(self) -> list[Parameter]:
        """Every parameter, once each (the values of :meth:`named_parameters`)."""
        return list(self.named_parameters().values())

    def modules(self) -> Iterator[Module]:
        """This module and every module under it, depth first."""
        yield self
        for _, child in self.named_children():
            yield from child.modules()

    def trainable_parameters(self) -> dict[str, Parameter]:
        """The parameters that are not frozen (``requires_grad`` True), by dotted name: what
        to give an optimiser after :meth:`freeze` (its state then holds nothing for the
        frozen ones)."""
        return {name: p for name, p in self.named_parameters().items() if p.requires_grad}

    def num_parameters(self, trainable_only: bool = False) -> int:
        """The number of parameter values (a tied weight counted once).

        Args:
            trainable_only: count only the parameters that are not frozen.
        """
        params = self.trainable_parameters().values() if trainable_only else self.parameters()
        return int(sum(p.data.size for p in params))

    def freeze(self) -> Module:
        """Freeze every parameter of this module and the modules under it
        (``requires_grad = False``): they receive no gradient and no optimiser changes them
        (see :class:`Parameter`). Returns self."""
        for parameter in self.parameters():
            parameter.requires_grad = False
        return self

    def unfreeze(self) -> Module:
        """Undo :meth:`freeze`: every parameter here trains again, from a zero gradient.
        Returns self."""
        for parameter in self.parameters():
            parameter.requires_grad = True
        return self

    def zero_grad(self) -> None:
        """Set every parameter's ``grad`` to zeros (backward passes accumulate into it)."""
        for parameter in self.parameters():
            parameter.zero_grad()

    # --- modes ------------------------------------------------------------------------
    def train(self, mode: bool = True) -> Module:
        """Set training mode (dropout active) on this module and every module under it.

        Args:
            mode: True for training, False for evaluation (as :meth:`eval`).

        Returns:
            self, so calls can be chained.
        """
        for module in self.modules():
            module.training = mode
        return self

    def eval(self) -> Module:
        """Evaluation mode (dropout is the identity)."""
        return self.train(False)

    # --- weights in and out -----------------------------------------------------------
    def state_dict(self) -> dict[str, np.ndarray]:
        """A copy of every parameter's values, keyed by dotted name (frozen ones included:
        whether a parameter is frozen is not part of the state)."""
        return {name: p.data.copy() for name, p in self.named_parameters().items()}

    def load_state_dict(self, state: dict[str, np.ndarray]) -> None:
        """Copy weights in. Strict: every mismatch is reported at once, nothing is changed.

        Args:
            state: dict of dotted name -> array, as :meth:`state_dict` gives (every name,
                each array of its parameter's shape).
        """
        if not isinstance(state, dict):
            raise TypeError(f"state must be a dict of name -> array, got {type(state).__name__}")
        own = self.named_parameters()
        # Strings would fail half-way through the copy below, and objects (None) would
        # silently become NaN weights: both are refused before anything is changed.
        non_numeric = [
            f"{name}: dtype {np.asarray(state[name]).dtype}"
            for name in own
            if name in state and not _is_numeric(np.asarray(state[name]).dtype)
        ]
        check_state_fits(
            state,
            {name: p.shape for name, p in own.items()},
            type(self).__name__,
            ("model", "checkpoint"),
            [f"non-numeric entries (expected float arrays): {non_numeric}"] if non_numeric else [],
        )
        for name, parameter in own.items():
            parameter.data[...] = np.asarray(state[name], dtype=parameter.data.dtype)

    def __repr__(self) -> str:
        children = ", ".join(name for name, _ in self.named_children())
        return f"{type(self).__name__}({children})"


def _on_its_forward(backward):
    """``backward`` that first restores the cache of the forward it belongs to."""

    @functools.wraps(backward)
    def on_its_forward(self, *grads, **options):
        records = vars(self).get("_records")
        if records is None:  # only direct .forward() calls so far
            records = self._records = _Records()
        if records.in_backward:  # super().backward(...) of a subclass: the same record
            return backward(self, *grads, **options)
        outermost = _depth.backward == 0
        _depth.backward += 1
        records.in_backward = True
        try:
            self._restore_forward(grads)
            grad_input = backward(self, *grads, **options)
        except BaseException:
            if outermost:  # a backward stopped half-way: what its forward kept is spent
                self.forget_forwards()
            raise
        finally:
            records.in_backward = False
            _depth.backward -= 1
        records.spent = not records.kept
        return grad_input

    return on_its_forward


def _kept_the_same(dropped: dict) -> bool:
    """Whether every module of ``dropped`` (module -> the records a call made at the top
    dropped) kept the same values again in that call."""
    return all(
        len(module._records.kept) == len(earlier)
        and all(
            _same_cache(old, new)
            for (old, _), (new, _) in zip(earlier, module._records.kept, strict=True)
        )
        for module, earlier in dropped.items()
        if earlier
    )


def _same_cache(a, b) -> bool:
    """Whether two forwards kept the same values (arrays equal, NaN included)."""
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same_cache(a[key], b[key]) for key in a)
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(map(_same_cache, a, b))
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        a, b = np.asarray(a), np.asarray(b)
        return (
            a.shape == b.shape
            and a.dtype == b.dtype
            and np.array_equal(a, b, equal_nan=a.dtype.kind in "fc")
        )
    if a is b:
        return True
    try:
        return bool(a == b)
    except (TypeError, ValueError):
        return False


def _holds_weights(value) -> bool:
    """A Module or Parameter, or a list, tuple or dict with one among its items."""
    if isinstance(value, (Module, Parameter)):
        return True
    items = value.values() if isinstance(value, dict) else value
    return isinstance(value, (list, tuple, dict)) and any(
        isinstance(item, (Module, Parameter)) for item in items
    )


def _is_numeric(dtype: np.dtype) -> bool:
    return np.issubdtype(dtype, np.integer) or np.issubdtype(dtype, np.floating)


def check_state_fits(
    state, expected: dict[str, tuple], owner: str, sides: tuple[str, str], more_problems=()
) -> None:
    """Raise one ValueError listing every way ``state`` does not fit ``expected`` shapes.

    Shared by ``Module.load_state_dict`` and ``Optimizer.load_state_dict``: missing,
    unexpected and mis-shaped entries (``sides`` names the two sides in the message, e.g.
    ``("model", "checkpoint")``), plus any ``more_problems`` the caller found.

    Args:
        state: the given dict of name -> array.
        expected: name -> the shape each entry must have.
        owner: what is being loaded, for the message (``"DecoderLM"``).
        sides: the names of the two sides, e.g. ``("model", "checkpoint")``.
        more_problems: further sentences to report.
    """
    mine, given = sides
    problems = []
    missing = sorted(set(expected) - set(state))
    unexpected = sorted(set(state) - set(expected))
    misshaped = [
        f"{name}: {given} {np.shape(state[name])} vs {mine} {shape}"
        for name, shape in expected.items()
        if name in state and np.shape(state[name]) != shape
    ]
    if missing:
        problems.append(f"missing entries: {missing}")
    if unexpected:
        problems.append(f"unexpected entries: {unexpected}")
    if misshaped:
        problems.append(f"mis-shaped entries: {misshaped}")
    problems.extend(more_problems)
    if problems:
        raise ValueError(f"load_state_dict: the state does not fit {owner}; " + "; ".join(problems))


@contextmanager
def in_mode(model: Module, training: bool) -> Iterator[Module]:
    """``with in_mode(model, training=False):`` runs the block with ``model`` in that mode and
    restores the mode it had before, also when the block raises.

    Args:
        model: any :class:`Module`.
        training: the mode inside the block.
    """
    modes = [(module, module.training) for module in model.modules()]  # each its own
    model.train(training)
    try:
        yield model
    finally:
        for module, was_training in modes:
            module.training = was_training


def evaluating(model: Module):
    """``with evaluating(model):`` evaluation mode (no dropout) inside the block only.

    Args:
        model: any :class:`Module`; its mode is restored after the block.
    """
    return in_mode(model, training=False)
