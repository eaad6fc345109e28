"""nbval settings for the course notebooks, a pytest plugin: the Makefile's NBVAL variable
loads it (``-p tests.nbval_plugin``) with the other command-line options. It lives with the
tests rather than as a conftest.py in notebooks/, which a learner's Lab shows.

Warnings must never reach a learner's screen, and the notebooks are written so none do; a
stray stderr line from a library (for example a deprecation notice after an upgrade) must
still not fail the course, so stderr is left out of the comparison.
"""


def pytest_collectstart(collector):
    path = getattr(collector, "path", None)
    if path is not None and path.suffix == ".ipynb":
        collector.skip_compare += ("stderr",)


# After a cell finishes, nbval waits only 5 s for its outputs (pictures, progress bars) to
# arrive; on a busy laptop or a shared CI runner they can take longer, which fails a cell
# whose result is right. Give them 60 s: a real hang is still caught by the cell timeout.
OUTPUT_TIMEOUT_S = 60


def pytest_collection_modifyitems(items):
    for item in items:
        if hasattr(item, "output_timeout"):
            item.output_timeout = OUTPUT_TIMEOUT_S
