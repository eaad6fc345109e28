"""The package's own code needs no subprocess, no ctypes and no thread on a learner's path.

A browser kernel (JupyterLite's Pyodide, where the course may go later) has none of the three:
no processes to start, no C libraries to open by hand, no threads. So every step a learner
takes is run here with ``subprocess.Popen``, ``ctypes.CDLL`` and ``threading.Thread.start``
patched, process-wide, to raise whenever a frame of ``tfscratch`` is on the call stack: loading
the names, training a few steps (progress bar on), generating, translating, and driving both
widgets. Libraries called from outside the package (pytest, the test itself) are not judged.
"""

import ctypes
import subprocess
import sys
import threading
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # headless: must precede any pyplot import

import numpy as np
import pytest

import tfscratch

PACKAGE = Path(tfscratch.__file__).resolve().parent


def tfscratch_frame() -> str | None:
    """``file:line`` of the innermost frame of the package on the current call stack."""
    frame = sys._getframe(1)
    while frame is not None:
        path = Path(frame.f_code.co_filename)
        if path.is_absolute() and PACKAGE in path.resolve().parents:
            return f"{path.relative_to(PACKAGE.parent)}:{frame.f_lineno}"
        frame = frame.f_back
    return None


@pytest.fixture
def browser_kernel(monkeypatch):
    """Popen, CDLL and Thread.start refuse to run under a tfscratch frame; the calls that
    were refused are listed (so an error swallowed by a library still fails the test)."""
    refused = []

    def guard(what, original):
        def guarded(*args, **kwargs):
            where = tfscratch_frame()
            if where is not None:
                refused.append(f"{what} from {where}")
                raise RuntimeError(f"{what} called from {where}: a browser kernel has none")
            return original(*args, **kwargs)

        return guarded

    monkeypatch.setattr(
        subprocess.Popen, "__init__", guard("subprocess", subprocess.Popen.__init__)
    )
    monkeypatch.setattr(ctypes.CDLL, "__init__", guard("ctypes", ctypes.CDLL.__init__))
    monkeypatch.setattr(threading.Thread, "start", guard("a thread", threading.Thread.start))
    yield refused
    assert refused == []


@pytest.mark.parametrize(
    "call, what",
    [
        ("import subprocess; subprocess.run(['true'])", "subprocess"),
        ("import ctypes; ctypes.CDLL(None)", "ctypes"),
        ("import threading; threading.Thread(target=print).start()", "a thread"),
    ],
)
def test_the_guard_catches_each_call_from_package_code(browser_kernel, call, what):
    # Code compiled as if it were in the package (the file name is what the guard reads).
    code = compile(call, str(PACKAGE / "data.py"), "exec")
    with pytest.raises(RuntimeError, match=f"{what} called from tfscratch/data.py"):
        exec(code, {})  # noqa: S102 (our own one-line snippet, run as package code)
    browser_kernel.clear()  # the refusal was the point of this test


def test_a_learners_session_runs_without_subprocess_ctypes_or_threads(browser_kernel):
    from tfscratch import batching, data, optim
    from tfscratch.tokenizers import CharTokenizer, WordTokenizer
    from tfscratch.train import Seq2SeqTask, train
    from tfscratch.widgets import AttentionExplorer, SamplingPlayground

    # the names, read from the table this very time
    data._year_range.cache_clear()
    data._names_in_years.cache_clear()
    names = data.load_names()
    assert len(names) == 29910

    # a few training steps of a names model, progress bar on
    tok = CharTokenizer.fit(names)
    X, Y = batching.lm_examples(names[:256], tok, block_size=16)
    model = tfscratch.DecoderLM(tok.vocab_size, 16, 2, 1, max_len=16, dropout=0.1, seed=0)
    history = train(
        model,
        optim.AdamW(model.parameters(), lr=3e-3),
        batching.trim_padding(batching.infinite_batches((X, Y), 32, seed=0)),
        5,
        val_batches=[(X[:64], Y[:64])],
        progress=True,
    )
    assert len(history) == 5

    # generation, with and without the cache
    ids = tfscratch.generate(model, [tok.bos_id], 8, temperature=0.8, seed=0)
    assert ids == tfscratch.generate(model, [tok.bos_id], 8, temperature=0.8, seed=0,
                                     use_kv_cache=False)  # fmt: skip

    # translation, greedy and with a beam, after a few training steps
    pairs = data.number_pairs(range(40))
    src_tok = WordTokenizer.fit([english for english, _ in pairs])
    tgt_tok = WordTokenizer.fit([spanish for _, spanish in pairs])
    src = [src_tok.encode(english) for english, _ in pairs]
    tgt = [tgt_tok.encode(spanish) for _, spanish in pairs]
    translator = tfscratch.Seq2SeqTransformer(
        src_tok.vocab_size, tgt_tok.vocab_size, 16, 2, 1, 1, max_len=16, seed=0
    )
    batches = batching.seq2seq_batches(src, tgt, 8, tok.pad_id, tok.bos_id, tok.eos_id)
    train(translator, optim.Adam(translator.parameters()), batches, 3, task=Seq2SeqTask())
    for beam_size in (1, 3):
        tfscratch.translate(translator, src[0], 8, tok.bos_id, tok.eos_id, beam_size=beam_size)

    # both widgets, built and driven as a learner does
    playground = SamplingPlayground(model, tok, n=3)
    playground.temperature.value = 0.0
    playground.prompt.value = "em"
    assert playground.error is None and len(playground.names) == 3
    explorer = AttentionExplorer(model, tok, ["emma", "olivia"])
    explorer.example.value = "olivia"
    explorer.head.value = 1
    assert explorer.weights.shape == (7, 7)
    assert np.allclose(explorer.weights.sum(axis=1), 1.0)
