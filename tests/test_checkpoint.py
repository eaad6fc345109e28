"""Saving and loading models: one .npz of plain arrays, never a pickle."""

import json
import os
import re
import zipfile
from pathlib import Path

import numpy as np
import pytest

import tfscratch
import tfscratch.checkpoint
from tfscratch import DecoderLM, EncoderClassifier, Seq2SeqTransformer

from .conftest import expect, randomize


def make_models():
    """The three models with non-default options, weights moved away from their seeded init
    (so a load that silently skipped the weights would rebuild *different* ones)."""
    return {
        "decoder": randomize(
            DecoderLM(
                13,
                16,
                4,
                2,
                d_ff=24,
                max_len=12,
                dropout=0.1,
                pos="sinusoidal",
                norm="post",
                activation="relu",
                tie_weights=False,
                seed=1,
            ),
            seed=11,
        ),
        "seq2seq": randomize(
            Seq2SeqTransformer(
                9, 7, 8, 2, 1, 2, max_len=10, pos="learned", seed=2, dtype=np.float64
            ),
            seed=12,
        ),
        "classifier": randomize(
            EncoderClassifier(6, 3, 8, 2, 1, max_len=10, pooling="cls", pos="none", seed=3), seed=13
        ),
    }


def run(model):
    """Deterministic logits of ``model`` on fixed inputs, in eval mode."""
    model.eval()
    rng = np.random.default_rng(0)
    if isinstance(model, Seq2SeqTransformer):
        src, tgt = rng.integers(0, 9, (2, 6)), rng.integers(0, 7, (2, 5))
        src_pad = np.array([[False] * 6, [False] * 4 + [True] * 2])
        return model(src, tgt, src_pad_mask=src_pad)
    if isinstance(model, EncoderClassifier):
        return model(rng.integers(0, 6, (3, 7)))
    return model(rng.integers(0, 13, (2, 9)))


def rewrite_npz(source: Path, target: Path, edit) -> None:
    """Copy the arrays of ``source`` to ``target`` after ``edit(arrays)`` changed the dict."""
    with np.load(source, allow_pickle=False) as archive:
        arrays = {name: archive[name] for name in archive.files}
    edit(arrays)
    np.savez(target, **arrays)


def quoted(path: Path) -> str:
    """How an error message quotes the path argument: ``path='...'``."""
    return re.escape(f"path={str(path)!r}")


# --- round trip -------------------------------------------------------------------------
@pytest.mark.parametrize("kind", ["decoder", "seq2seq", "classifier"])
def test_save_then_load_gives_identical_logits(tmp_path, kind):
    model = make_models()[kind]
    path = tfscratch.save(model, tmp_path / f"{kind}.npz")
    loaded = tfscratch.load(path)
    assert type(loaded) is type(model)
    assert loaded.config == model.config
    for name, value in model.state_dict().items():
        assert loaded.state_dict()[name].dtype == value.dtype
        np.testing.assert_array_equal(loaded.state_dict()[name], value)
    np.testing.assert_array_equal(run(loaded), run(model))


def test_loaded_model_does_not_share_memory_with_the_saved_one(tmp_path):
    model = make_models()["decoder"]
    loaded = tfscratch.load(tfscratch.save(model, tmp_path / "m.npz"))
    before = run(loaded)
    model.blocks[0].attn.q_proj.weight.data += 1.0
    np.testing.assert_array_equal(run(loaded), before)


def test_saved_file_holds_only_plain_arrays_and_json_metadata(tmp_path):
    model = make_models()["decoder"]
    path = tfscratch.save(model, tmp_path / "m.npz")
    assert zipfile.is_zipfile(path)
    with np.load(path, allow_pickle=False) as archive:  # would raise on any object array
        arrays = {name: archive[name] for name in archive.files}
    assert all(array.dtype.kind != "O" for array in arrays.values())
    meta = json.loads(str(arrays.pop("__tfscratch__")))
    assert meta == {
        "format": "tfscratch-checkpoint-v1",
        "class": "DecoderLM",
        "config": model.config,
    }
    assert set(arrays) == {f"param/{name}" for name in model.named_parameters()}


def test_save_writes_exactly_the_given_name_and_creates_folders(tmp_path):
    model = make_models()["classifier"]
    path = tmp_path / "runs" / "best" / "model.ckpt"  # no .npz suffix, folders missing
    assert tfscratch.save(model, str(path)) == path
    assert sorted(p.name for p in path.parent.iterdir()) == ["model.ckpt"]
    np.testing.assert_array_equal(run(tfscratch.load(path)), run(model))


def test_saved_file_gets_the_permissions_of_any_new_file(tmp_path):
    # written through a private temporary file, but the result is not private: with
    # umask 022 it is 0644, exactly what open(path, "w") would have made.
    old_umask = os.umask(0o022)
    try:
        path = tfscratch.save(make_models()["classifier"], tmp_path / "m.npz")
        plain = tmp_path / "plain.txt"
        plain.write_text("x")
    finally:
        os.umask(old_umask)
    assert path.stat().st_mode & 0o777 == plain.stat().st_mode & 0o777 == 0o644


def test_saving_over_a_checkpoint_replaces_it_and_leaves_no_temporary_file(tmp_path):
    first, second = make_models()["decoder"], DecoderLM(13, 8, 2, 1, max_len=12, seed=5)
    path = tmp_path / "m.npz"
    tfscratch.save(first, path)
    tfscratch.save(second, path)
    assert [p.name for p in tmp_path.iterdir()] == ["m.npz"]
    assert tfscratch.load(path).config == second.config


def test_a_failed_save_keeps_the_old_checkpoint_and_leaves_no_temporary_file(tmp_path, monkeypatch):
    model = make_models()["decoder"]
    path = tmp_path / "m.npz"
    tfscratch.save(model, path)
    old_bytes = path.read_bytes()

    def crash_half_way(file, **arrays):
        file.write(b"PK\x03\x04 half a checkpoint")
        raise OSError("disk full")

    monkeypatch.setattr(tfscratch.checkpoint.np, "savez", crash_half_way)
    with pytest.raises(OSError, match="disk full"):
        tfscratch.save(DecoderLM(13, 8, 2, 1, max_len=12, seed=5), path)
    monkeypatch.undo()
    assert [p.name for p in tmp_path.iterdir()] == ["m.npz"]
    assert path.read_bytes() == old_bytes


# --- refusing what is not a checkpoint --------------------------------------------------
MARKER_NAME = "payload_ran.txt"


def _write_marker(path):
    Path(path).write_text("the pickled object's code ran")
    return 0


class Payload:
    """Unpickling this object calls ``_write_marker``: the classic pickle exploit."""

    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return (_write_marker, (self.marker,))


@pytest.mark.parametrize("where", ["param/blocks.0.ln1.gamma", "__tfscratch__", "extra"])
def test_pickled_object_is_refused_and_its_code_never_runs(tmp_path, where):
    saved = tfscratch.save(make_models()["decoder"], tmp_path / "good.npz")
    marker = tmp_path / MARKER_NAME
    hostile = tmp_path / "hostile.npz"

    def plant(arrays):
        arrays[where] = np.array([Payload(marker)], dtype=object)

    rewrite_npz(saved, hostile, plant)
    with pytest.raises(ValueError, match=quoted(hostile) + ".*pickled Python objects"):
        tfscratch.load(hostile)
    assert not marker.exists()
    # The payload is live: NumPy with pickles allowed runs it. This is what load refuses.
    with np.load(hostile, allow_pickle=True) as archive:
        archive[where]
    assert marker.exists()


def test_raw_pickle_file_is_refused_without_running_it(tmp_path):
    import pickle

    marker = tmp_path / MARKER_NAME
    path = tmp_path / "model.pkl"
    path.write_bytes(pickle.dumps(Payload(marker)))
    with pytest.raises(ValueError, match=quoted(path) + ".*not a tfscratch checkpoint"):
        tfscratch.load(path)
    assert not marker.exists()


@pytest.mark.parametrize(
    "content, why",
    [
        (b"hello, I am a text file\n", "not an .npz"),
        (b"", "not an .npz"),
        (b"PK\x03\x04 truncated zip", "not an .npz"),
    ],
)
def test_a_file_that_is_not_an_npz_is_not_a_checkpoint(tmp_path, content, why):
    path = tmp_path / "model.npz"
    path.write_bytes(content)
    with pytest.raises(ValueError, match=quoted(path) + ".*not a tfscratch checkpoint.*" + why):
        tfscratch.load(path)


def test_a_single_npy_array_is_not_a_checkpoint(tmp_path):
    path = tmp_path / "weights.npy"
    np.save(path, np.zeros(3))
    with pytest.raises(ValueError, match=quoted(path) + ".*not a tfscratch checkpoint"):
        tfscratch.load(path)


def test_an_npz_without_metadata_is_not_a_checkpoint(tmp_path):
    path = tmp_path / "arrays.npz"
    np.savez(path, weight=np.zeros((2, 2)))
    with pytest.raises(
        ValueError, match=quoted(path) + ".*not a tfscratch checkpoint.*no __tfscratch__ entry"
    ):
        tfscratch.load(path)


@pytest.mark.parametrize(
    "meta, why",
    [
        ("not json at all", "not a JSON object"),
        ("[1, 2]", "not a JSON object"),
        (
            '{"format": "other-format-v9", "class": "DecoderLM", "config": {}}',
            "format 'other-format-v9'",
        ),
        ('{"format": "tfscratch-checkpoint-v1", "class": "Evil", "config": {}}', "class 'Evil'"),
    ],
)
def test_an_npz_with_foreign_metadata_is_not_a_checkpoint(tmp_path, meta, why):
    saved = tfscratch.save(make_models()["decoder"], tmp_path / "good.npz")
    path = tmp_path / "foreign.npz"
    rewrite_npz(saved, path, lambda arrays: arrays.update(__tfscratch__=np.array(meta)))
    with pytest.raises(
        ValueError, match=quoted(path) + ".*not a tfscratch checkpoint.*" + re.escape(why)
    ):
        tfscratch.load(path)


def test_a_config_that_builds_no_model_is_reported(tmp_path):
    saved = tfscratch.save(make_models()["decoder"], tmp_path / "good.npz")
    path = tmp_path / "bad_config.npz"

    def break_config(arrays):
        meta = json.loads(str(arrays["__tfscratch__"]))
        meta["config"]["n_heads"] = 5  # 16 is not divisible by 5
        arrays["__tfscratch__"] = np.array(json.dumps(meta))

    rewrite_npz(saved, path, break_config)
    with pytest.raises(
        ValueError,
        match=quoted(path) + ".*does not build a DecoderLM.*"
        "d_model=16 is not divisible by n_heads=5",
    ):
        tfscratch.load(path)


def test_unexpected_entries_are_refused(tmp_path):
    saved = tfscratch.save(make_models()["decoder"], tmp_path / "good.npz")
    path = tmp_path / "extra.npz"
    rewrite_npz(saved, path, lambda arrays: arrays.update(notes=np.arange(3)))
    with pytest.raises(ValueError, match=quoted(path) + r".*unexpected entries \['notes'\]"):
        tfscratch.load(path)


def test_weights_that_do_not_fit_the_config_are_listed(tmp_path):
    saved = tfscratch.save(make_models()["decoder"], tmp_path / "good.npz")
    path = tmp_path / "misfit.npz"

    def edit(arrays):
        del arrays["param/blocks.1.ffn.fc1.bias"]
        arrays["param/blocks.2.attn.q_proj.weight"] = np.zeros((16, 16), np.float32)
        arrays["param/tok_emb.weight"] = np.zeros((14, 16), np.float32)

    rewrite_npz(saved, path, edit)
    with pytest.raises(ValueError) as error:
        tfscratch.load(path)
    message = str(error.value)
    assert f"path={str(path)!r}" in message and "do not fit the DecoderLM" in message
    assert "missing entries: ['blocks.1.ffn.fc1.bias']" in message
    assert "unexpected entries: ['blocks.2.attn.q_proj.weight']" in message
    assert "tok_emb.weight: checkpoint (14, 16) vs model (13, 16)" in message


def test_loading_a_missing_file_raises_file_not_found(tmp_path):
    with pytest.raises(FileNotFoundError, match=re.escape(str(tmp_path / "nope.npz"))):
        tfscratch.load(tmp_path / "nope.npz")


def test_save_refuses_what_is_not_a_model(tmp_path):
    with pytest.raises(TypeError, match=expect("model", "MultiHeadAttention", "DecoderLM")):
        tfscratch.save(tfscratch.nn.MultiHeadAttention(8, 2), tmp_path / "m.npz")
    assert not os.listdir(tmp_path)


# --- hostile files: refused before they cost memory ------------------------------------------
# A checkpoint's weights here are kilobytes; each hostile file below would cost hundreds of
# MiB if its declarations were believed. tracemalloc sees NumPy's allocations.
MEMORY_LIMIT = 32 * 2**20


def peak_memory_of(call) -> int:
    import tracemalloc

    tracemalloc.start()
    try:
        call()
    finally:
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
    return peak


def small_model():
    return DecoderLM(11, 8, 2, 2, max_len=8, seed=0)


def test_a_zip_bomb_is_refused_without_unpacking_it(tmp_path):
    saved = tfscratch.save(small_model(), tmp_path / "good.npz")
    bomb = tmp_path / "bomb.npz"
    declared = 256 * 2**20  # 256 MiB of zeros, deflated to about 256 KiB
    with zipfile.ZipFile(saved) as source, zipfile.ZipFile(bomb, "w", zipfile.ZIP_DEFLATED) as z:
        for name in source.namelist():
            z.writestr(name, source.read(name))
        with z.open("param/zzz.npy", "w") as member:
            header = {"descr": "<f4", "fortran_order": False, "shape": (declared // 4,)}
            np.lib.format.write_array_header_1_0(member, header)
            for _ in range(declared // 2**20):
                member.write(b"\0" * 2**20)
    assert bomb.stat().st_size < 2**20

    def load():
        with pytest.raises(ValueError, match=expect(str(bomb), "unexpected", "zzz")):
            tfscratch.load(bomb)

    assert peak_memory_of(load) < MEMORY_LIMIT


def test_a_config_that_claims_a_large_model_is_refused_before_it_is_built(tmp_path):
    model = small_model()
    meta = {
        "format": tfscratch.checkpoint.FORMAT,
        "class": "DecoderLM",
        "config": {**model.config, "vocab_size": 200_000, "d_model": 512},
    }
    big = tmp_path / "big.npz"
    arrays = {"param/" + name: value for name, value in model.state_dict().items()}
    np.savez(big, __tfscratch__=np.array(json.dumps(meta)), **arrays)

    def load():
        with pytest.raises(
            ValueError, match=expect("at least 104,497,152 parameters", "holds 1,912 numbers")
        ):
            tfscratch.load(big)

    assert peak_memory_of(load) < MEMORY_LIMIT


def test_a_header_that_declares_terabytes_is_refused_unread(tmp_path):
    saved = tfscratch.save(small_model(), tmp_path / "good.npz")
    huge = tmp_path / "huge.npz"
    with zipfile.ZipFile(saved) as source, zipfile.ZipFile(huge, "w") as z:
        for name in source.namelist():
            if name != "param/tok_emb.weight.npy":
                z.writestr(name, source.read(name))
        with z.open("param/tok_emb.weight.npy", "w") as member:
            header = {"descr": "<f4", "fortran_order": False, "shape": (2**40, 8)}
            np.lib.format.write_array_header_1_0(member, header)

    def load():
        with pytest.raises(ValueError, match=expect("tok_emb.weight", "(1099511627776, 8)")):
            tfscratch.load(huge)

    assert peak_memory_of(load) < MEMORY_LIMIT


def test_a_folder_is_not_a_checkpoint(tmp_path):
    with pytest.raises(ValueError, match=expect(str(tmp_path), "not a regular file")):
        tfscratch.load(tmp_path)
