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


def save(model: Module, path: str | os.PathLike) -> Path:
    """Write ``model`` (its class, ``config`` and weights) to ``path`` atomically.

    The file is written next to its destination and renamed into place, so a crash never
    leaves half a checkpoint behind. Returns the path written (``.npz`` is appended by NumPy
    conventions only if you leave it off; we write exactly ``path``).
    """
    if type(model).__name__ not in MODELS or not hasattr(model, "config"):
        raise TypeError(f"save expects one of {sorted(MODELS)}, got {type(model).__name__}")
    path = Path(path)
    meta = json.dumps({"format": FORMAT, "class": type(model).__name__, "config": model.config})
    arrays = {_PARAM_PREFIX + name: value for name, value in model.state_dict().items()}
    arrays[_META_KEY] = np.array(meta)  # a unicode scalar: no pickle needed
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(dir=path.parent, suffix=".npz.partial")
    try:
        with os.fdopen(handle, "wb") as file:
            np.savez(file, **arrays)
        os.replace(temporary, path)
    except BaseException:
        os.unlink(temporary)
        raise
    return path


def load(path: str | os.PathLike) -> Module:
    """Rebuild the model saved at ``path``; never unpickles.

    Raises ValueError when the file is not a tfscratch checkpoint, or its weights do not fit
    the model its config describes (listing what does not fit).
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no checkpoint at {path}")
    try:
        with np.load(path, allow_pickle=False) as archive:
            if _META_KEY not in archive.files:
                raise ValueError(f"{path.name} is not a tfscratch checkpoint (no {_META_KEY} entry)")
            meta = json.loads(str(archive[_META_KEY]))
            state = {
                name[len(_PARAM_PREFIX):]: archive[name]
                for name in archive.files
                if name.startswith(_PARAM_PREFIX)
            }
    except (zipfile.BadZipFile, OSError, EOFError) as error:
        raise ValueError(f"{path.name} is not a tfscratch checkpoint (.npz): {error}") from None
    except ValueError as error:
        if "pickle" in str(error).lower():
            raise ValueError(
                f"{path.name} holds pickled Python objects; tfscratch checkpoints never do, "
                "and loading refuses to unpickle (it could run code)"
            ) from None
        raise
    if meta.get("format") != FORMAT or meta.get("class") not in MODELS:
        raise ValueError(
            f"{path.name} is not a tfscratch checkpoint: format {meta.get('format')!r}, "
            f"class {meta.get('class')!r}"
        )
    model = MODELS[meta["class"]](**meta["config"])
    model.load_state_dict(state)
    return model
