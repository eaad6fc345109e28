"""Saving and loading models: one ``.npz`` holding the config and the weights.

``np.load(..., allow_pickle=False)`` is the whole security story: an ``.npz`` may contain
pickled Python objects, and unpickling runs code. We only ever store plain numeric arrays
and one JSON string, so refusing pickles costs nothing and a hostile file cannot run.
"""

from __future__ import annotations

import json
import math
import os
import tempfile
import zipfile
from pathlib import Path

import numpy as np

from .models import MODELS
from .module import Module, check_state_fits

FORMAT = "tfscratch-checkpoint-v1"
_META_KEY = "__tfscratch__"
_PARAM_PREFIX = "param/"
# the parameter names of learned position tables (DecoderLM, EncoderClassifier; Seq2Seq)
_POSITION_TABLES = ("pos_emb.weight", "src_pos.weight", "tgt_pos.weight")
# The metadata entry is one JSON string of a few hundred bytes; a larger one is refused unread.
MAX_META_BYTES = 1 << 20


def _not_a_checkpoint(path: Path, why: str) -> ValueError:
    return ValueError(f"path={str(path)!r} is not a tfscratch checkpoint: {why}")


def save(model: Module, path: str | os.PathLike) -> Path:
    """Write ``model`` (its class, ``config`` and weights) to ``path`` atomically.

    The file is first written to a temporary file in the destination's folder and then
    renamed into place, so a crash never leaves half a checkpoint behind (an older file at
    ``path`` stays intact). The name is used exactly as given: unlike ``np.savez(filename)``,
    no ``.npz`` suffix is added, because NumPy receives an open file, not a name. Missing
    parent folders are created.

    Args:
        model: a ``DecoderLM``, ``Seq2SeqTransformer`` or ``EncoderClassifier``.
        path: the file to write (``.npz`` by convention).

    Returns:
        ``Path(path)``.
    """
    if type(model).__name__ not in MODELS or not hasattr(model, "config"):
        raise TypeError(f"model must be one of {sorted(MODELS)}, got {type(model).__name__}")
    path = Path(path)
    meta = json.dumps({"format": FORMAT, "class": type(model).__name__, "config": model.config})
    arrays = {_PARAM_PREFIX + name: value for name, value in model.state_dict().items()}
    arrays[_META_KEY] = np.array(meta)  # a unicode scalar: no pickle needed
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(dir=path.parent, suffix=".npz.partial")
    try:
        with os.fdopen(handle, "wb") as file:
            np.savez(file, **arrays)
        # mkstemp makes the file private (0600); give it the permissions any new file
        # gets (0666 less the umask), as np.savez(path) would have.
        os.chmod(temporary, 0o666 & ~_current_umask())
        os.replace(temporary, path)
    except BaseException:
        os.unlink(temporary)
        raise
    return path


def _current_umask() -> int:
    umask = os.umask(0)  # the only way to read it is to set it...
    os.umask(umask)  # ...and put it back at once
    return umask


def load(path: str | os.PathLike) -> Module:
    """Rebuild the model saved at ``path``; never unpickles.

    Raises ValueError when the file is not a tfscratch checkpoint (not an ``.npz``, no
    metadata, entries it should not have, pickled objects), or its weights do not fit the
    model its config describes (listing what does not fit).

    Args:
        path: a file written by :func:`save`.

    Returns:
        the model, of the class and config saved, with the saved weights.
    """
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"no checkpoint at {path}")
    if not path.is_file():
        raise _not_a_checkpoint(path, "it is not a regular file (a folder, a device or a pipe)")
    # np.load takes any file that is neither a zip nor an .npy for a pickle (and refuses
    # it as one), so a text file would be reported as "pickled": check for a zip first.
    if not zipfile.is_zipfile(path):
        raise _not_a_checkpoint(path, "it is not an .npz (zip) archive")
    try:
        with zipfile.ZipFile(path) as archive:
            return _load_archive(path, archive)
    except (zipfile.BadZipFile, OSError, EOFError) as error:
        raise _not_a_checkpoint(path, f"unreadable .npz ({error})") from None
    except MemoryError:
        raise _not_a_checkpoint(path, "it declares more data than this machine's memory holds")


def _load_archive(path: Path, archive: zipfile.ZipFile) -> Module:
    """Check everything the archive declares (names, sizes, the config's model) before a
    single weight is read, so a small hostile file cannot make us allocate gigabytes."""
    members = {info.filename: info for info in archive.infolist()}
    # Headers first (cheap, nothing allocated): a pickled object anywhere is refused as such,
    # not merely as an entry we do not expect.
    headers = {name: _read_header(path, archive, name) for name in members if name.endswith(".npy")}
    meta_member = _META_KEY + ".npy"
    if meta_member not in members:
        raise _not_a_checkpoint(path, f"it has no {_META_KEY} entry")
    stray = sorted(
        name.removesuffix(".npy")
        for name in members
        if name != meta_member and not (name.startswith(_PARAM_PREFIX) and name.endswith(".npy"))
    )
    if stray:
        raise _not_a_checkpoint(
            path, f"unexpected entries {stray}; expected only {_META_KEY} and {_PARAM_PREFIX}*"
        )
    if members[meta_member].file_size > MAX_META_BYTES:
        raise _not_a_checkpoint(
            path,
            f"its {_META_KEY} entry declares {members[meta_member].file_size:,} bytes; a "
            f"config takes at most {MAX_META_BYTES:,}",
        )
    shape, dtype = headers[meta_member]
    if dtype.kind != "U" or math.prod(shape) * dtype.itemsize > MAX_META_BYTES:
        raise _not_a_checkpoint(
            path, f"its {_META_KEY} entry is {dtype} of shape {shape}; expected one JSON string"
        )
    meta = _read_meta(path, archive, meta_member)
    declared = {  # parameter name -> (shape, dtype), from the .npy headers only
        name[len(_PARAM_PREFIX) : -len(".npy")]: header
        for name, header in headers.items()
        if name != meta_member
    }
    declared_numbers = sum(math.prod(shape) for shape, _ in declared.values())
    needed = _smallest_model(meta["config"])
    if needed > declared_numbers:
        raise _not_a_checkpoint(
            path,
            f"its config describes a {meta['class']} of at least {needed:,} parameters, but the "
            f"file holds {declared_numbers:,} numbers",
        )
    try:
        model = MODELS[meta["class"]](**meta["config"])
    except (TypeError, ValueError) as error:
        raise _not_a_checkpoint(
            path, f"its config does not build a {meta['class']} ({error})"
        ) from None
    except MemoryError:
        raise _not_a_checkpoint(
            path, f"its config describes a {meta['class']} too large for this machine's memory"
        ) from None
    expected = {name: p.shape for name, p in model.named_parameters().items()}
    try:
        check_state_fits(
            {
                name: np.broadcast_to(np.zeros((), dtype), shape)
                for name, (shape, dtype) in declared.items()
            },
            expected,
            meta["class"],
            ("model", "checkpoint"),
        )
    except ValueError as error:
        raise ValueError(
            f"path={str(path)!r}: the weights do not fit the {meta['class']} its config "
            f"describes; {error}{_positions_hint(meta['config'], declared, model)}"
        ) from None
    # Every declared shape is the model's own: reading the weights now costs what the model does.
    state = {}
    for name in declared:
        with archive.open(_PARAM_PREFIX + name + ".npy") as file:
            state[name] = _read_array(path, file, name)
    model.load_state_dict(state)
    return model


def _read_meta(path: Path, archive: zipfile.ZipFile, member: str) -> dict:
    with archive.open(member) as file:
        raw = _read_array(path, file, _META_KEY)
    try:
        meta = json.loads(str(raw))
    except json.JSONDecodeError:
        meta = None
    if (
        not isinstance(meta, dict)
        or meta.get("format") != FORMAT
        or meta.get("class") not in MODELS
        or not isinstance(meta.get("config"), dict)
    ):
        found = (
            f"format {meta.get('format')!r}, class {meta.get('class')!r}"
            if isinstance(meta, dict)
            else f"{_META_KEY} is not a JSON object"
        )
        raise _not_a_checkpoint(
            path, f"{found}; expected format {FORMAT!r}, a class in {sorted(MODELS)} and a config"
        )
    return meta


def _read_header(path: Path, archive: zipfile.ZipFile, member: str):
    """``(shape, dtype)`` of an ``.npy`` entry, from its header alone (nothing allocated)."""
    name = member.removeprefix(_PARAM_PREFIX).removesuffix(".npy")
    with archive.open(member) as file:
        try:
            version = np.lib.format.read_magic(file)
            if version == (1, 0):
                shape, _, dtype = np.lib.format.read_array_header_1_0(file)
            elif version == (2, 0):
                shape, _, dtype = np.lib.format.read_array_header_2_0(file)
            else:
                raise ValueError(f".npy format version {version}")
        except ValueError as error:
            raise _not_a_checkpoint(
                path, f"entry {name!r} is not a plain .npy array ({error})"
            ) from None
    if dtype.hasobject:
        raise _pickled(path)
    if member.startswith(_PARAM_PREFIX) and not _is_number(dtype):  # the meta is a string
        raise _not_a_checkpoint(path, f"entry {name!r} has dtype {dtype}; weights are numbers")
    return shape, dtype


def _is_number(dtype: np.dtype) -> bool:
    return np.issubdtype(dtype, np.floating) or np.issubdtype(dtype, np.integer)


def _read_array(path: Path, file, name: str) -> np.ndarray:
    try:
        return np.lib.format.read_array(file, allow_pickle=False)
    except ValueError as error:
        if "pickle" in str(error).lower():
            raise _pickled(path) from None
        raise _not_a_checkpoint(path, f"unreadable entry {name!r} ({error})") from None


def _pickled(path: Path) -> ValueError:
    return ValueError(
        f"path={str(path)!r} holds pickled Python objects; tfscratch checkpoints never do, "
        "and loading refuses to unpickle (it could run code)"
    )


def _smallest_model(config: dict) -> int:
    """A lower bound on the parameters of the model ``config`` describes: its token tables
    (``*vocab_size`` x ``d_model``) and each layer's four attention projections
    (4 ``d_model``^2). Checked before the model is built, so a config that claims a huge model
    in a small file is refused without allocating it. 0 when the values are not plain ints
    (the model's constructor then refuses them with its own message)."""
    numbers = {key: value for key, value in config.items() if type(value) is int and value > 0}
    d_model = numbers.get("d_model", 0)
    vocab = sum(value for key, value in numbers.items() if key.endswith("vocab_size"))
    layers = sum(
        numbers.get(key, 0) for key in ("n_layers", "n_encoder_layers", "n_decoder_layers")
    )
    return vocab * d_model + layers * 4 * d_model * d_model


def _positions_hint(config: dict, state: dict, model: Module) -> str:
    """Say so when the misfit is the position table: weights saved with ``pos="learned"``
    under a config with another ``pos`` (which has no table), or the other way round."""
    expected = model.named_parameters()
    tables = sorted(name for name in set(state) ^ set(expected) if name.endswith(_POSITION_TABLES))
    if not tables:
        return ""
    pos = config.get("pos")
    if any(name in state for name in tables):
        return (
            f" (the file holds learned position tables {tables}, but its config says "
            f"pos={pos!r}, which learns none: the weights come from a pos='learned' model)"
        )
    return (
        f" (its config says pos={pos!r}, but the file has no position tables {tables}: the "
        "weights come from a model whose positions are not learned, e.g. pos='sinusoidal' "
        "or pos='rope')"
    )
