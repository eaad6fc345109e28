"""The progress bar of long loops (:func:`tfscratch.train.train`): tqdm, and nothing else.

``tqdm.auto`` draws a widget in Jupyter and text in a terminal. Two things differ from a bare
``tqdm.auto.tqdm``:

* No monitor thread. tqdm normally starts a thread that wakes every 10 s to watch its bars;
  :class:`ProgressBar` sets ``monitor_interval = 0`` on itself (not on tqdm, so a learner's
  own bars keep tqdm's defaults), and a training run starts no thread.
* The saved notebook shows the finished bar. A notebook stores, beside a widget, the text of
  the frame it was first displayed with: for a progress bar, ``0%``, which is all a reader on
  GitHub or nbviewer would see. In Jupyter the bar is therefore displayed through a display
  handle and sent again when it has finished (:func:`progress_bar`).
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager

from tqdm.auto import tqdm


class ProgressBar(tqdm):
    """``tqdm.auto.tqdm`` without the monitor thread (``monitor_interval = 0``)."""

    monitor_interval = 0


def _is_notebook_bar() -> bool:
    """True when ``tqdm.auto`` chose the Jupyter widget (so IPython is running already)."""
    notebook = sys.modules.get("tqdm.notebook")
    return notebook is not None and issubclass(ProgressBar, notebook.tqdm)


@contextmanager
def progress_bar(total: int, desc: str, enabled: bool = True) -> Iterator[ProgressBar]:
    """A progress bar for ``total`` steps, closed when the ``with`` block ends.

    Args:
        total: the number of steps (``bar.update(1)`` after each).
        desc: the label in front of the bar.
        enabled: False: a bar that shows nothing (tqdm's ``disable=True``).

    Yields:
        the :class:`ProgressBar`. In Jupyter, once the block has ended without an error, the
        finished bar is sent again, so that the saved notebook shows it (100%, its last
        postfix) instead of the first frame.
    """
    if not (enabled and _is_notebook_bar()):
        with ProgressBar(total=total, desc=desc, disable=not enabled, leave=True) as bar:
            yield bar
        return
    from IPython.display import display  # a Jupyter kernel has imported it already

    with ProgressBar(total=total, desc=desc, leave=True, display=False) as bar:
        handle = display(bar.container, display_id=True)  # None without a running kernel
        yield bar
    if handle is not None:
        handle.update(bar.container)
