"""Saving and loading models: one ``.npz`` holding the config and the weights.

``np.load(..., allow_pickle=False)`` is the whole security story: an ``.npz`` may contain
pickled Python objects, and unpickling runs code. We only ever store plain numeric arrays
and one JSON string, so refusing pickles costs nothing and a hostile file cannot run.
"""

from __future__ import annotations

import json
import os
import tempfile
import zipfile
from pathlib import Path

import numpy as np

from .models import MODELS
from .module import Module

FORMAT = "tfscratch-checkpoint-v1"
_META_KEY = "__tfscratch__"
_PARAM_PREFIX = "param/"
# the parameter names of learned position tables (DecoderLM, EncoderClassifier; Seq2Seq)
_POSITION_TABLES = ("pos_emb.weight", "src_pos.weight", "tgt_pos.weight")


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
    if not path.is_file():
        raise FileNotFoundError(f"no checkpoint at {path}")
    # np.load takes any file that is neither a zip nor an .npy for a pickle (and refuses
    # it as one), so a text file would be reported as "pickled": check for a zip first.
    if not zipfile.is_zipfile(path):
        raise _not_a_checkpoint(path, "it is not an .npz (zip) archive")
    try:
        with np.load(path, allow_pickle=False) as archive:
            # Every entry is read, not only the ones we use, so that a pickled object
            # anywhere in the file is refused rather than silently skipped.
            entries = {name: archive[name] for name in archive.files}
    except ValueError as error:
        if "pickle" not in str(error).lower():
            raise _not_a_checkpoint(path, f"unreadable .npz entry ({error})") from None
        raise ValueError(
            f"path={str(path)!r} holds pickled Python objects; tfscratch checkpoints never do, "
            "and loading refuses to unpickle (it could run code)"
        ) from None
    except (zipfile.BadZipFile, OSError, EOFError) as error:
        raise _not_a_checkpoint(path, f"unreadable .npz ({error})") from None
    if _META_KEY not in entries:
        raise _not_a_checkpoint(path, f"it has no {_META_KEY} entry")
    try:
        meta = json.loads(str(entries.pop(_META_KEY)))
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
    stray = sorted(name for name in entries if not name.startswith(_PARAM_PREFIX))
    if stray:
        raise _not_a_checkpoint(
            path, f"unexpected entries {stray}; expected only {_META_KEY} and {_PARAM_PREFIX}*"
        )
    state = {name[len(_PARAM_PREFIX) :]: value for name, value in entries.items()}
    try:
        model = MODELS[meta["class"]](**meta["config"])
    except (TypeError, ValueError) as error:
        raise _not_a_checkpoint(
            path, f"its config does not build a {meta['class']} ({error})"
        ) from None
    try:
        model.load_state_dict(state)
    except ValueError as error:
        raise ValueError(
            f"path={str(path)!r}: the weights do not fit the {meta['class']} its config "
            f"describes; {error}{_positions_hint(meta['config'], state, model)}"
        ) from None
    return model


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
