"""nbval settings for the course notebooks (the command-line options live in the Makefile).

Warnings must never reach a learner's screen, and the notebooks are written so none do; a
stray stderr line from a library (for example a deprecation notice after an upgrade) must
still not fail the course, so stderr is left out of the comparison.
"""


def pytest_collectstart(collector):
    path = getattr(collector, "path", None)
    if path is not None and path.suffix == ".ipynb":
        collector.skip_compare += ("stderr",)
