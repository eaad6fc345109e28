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


# nbval reads a cell's messages only after the cell has finished. ZeroMQ keeps at most 1,000
# unread messages on each side of the kernel's output channel and drops the rest, so a long
# cell that sends many (a progress bar redrawn for minutes on a busy machine) loses its final
# "idle" message and fails with "Timeout ... waiting for output" although it ran fine (a bar
# redrawn 30,000 times failed so: tests/test_nbval_plugin.py). The kernel client therefore
# keeps every message it receives (a receive limit of 0: none), as a frontend that reads them
# as they come in never needs to. One ZeroMQ context serves every notebook's client.
_CLIENT_CONTEXT = None


def _start_new_kernel_keeping_every_message(startup_timeout=60, kernel_name="python", **kwargs):
    global _CLIENT_CONTEXT
    import zmq
    from jupyter_client.manager import KernelManager
    from nbval import kernel as nbval_kernel

    if _CLIENT_CONTEXT is None:
        _CLIENT_CONTEXT = zmq.Context()
        _CLIENT_CONTEXT.setsockopt(zmq.RCVHWM, 0)  # the default of every socket it makes later
    km = KernelManager(
        kernel_name=kernel_name, kernel_spec_manager=nbval_kernel.NbvalKernelspecManager()
    )
    km.start_kernel(**kwargs)
    kc = km.client(context=_CLIENT_CONTEXT)
    kc.start_channels()
    try:
        kc.wait_for_ready(timeout=startup_timeout)
    except RuntimeError:
        kc.stop_channels()
        km.shutdown_kernel()
        raise
    return km, kc


def pytest_configure(config):
    from nbval import kernel as nbval_kernel

    nbval_kernel.start_new_kernel = _start_new_kernel_keeping_every_message


def pytest_addoption(parser):
    parser.addoption(
        "--rerun-cells",
        action="store_true",
        help="after each notebook, run its exercises and unchecked-output cells again",
    )


def pytest_collection_modifyitems(config, items):
    for item in items:
        if hasattr(item, "output_timeout"):
            item.output_timeout = OUTPUT_TIMEOUT_S
    if config.getoption("--rerun-cells"):
        items[:] = _with_reruns(items)


# Every cell can be re-run (a learner re-runs a training cell after an interrupt, or an
# exercise after a fix): after a notebook's last cell, in the same kernel, each exercise
# (its solution cell and its graded check) and each cell whose output is not compared (a
# training run, a sample, a timing) with the code cell after it (which asserts what it made)
# run again, and their outputs must again match the stored ones.
def _with_reruns(items):
    by_notebook: dict = {}
    for item in items:
        by_notebook.setdefault(item.parent, []).append(item)
    result = []
    for parent, cells in by_notebook.items():
        result.extend(cells)
        if not all(hasattr(cell, "cell_num") for cell in cells):
            continue
        chosen = set()
        for index, item in enumerate(cells):
            nbgrader = item.cell.metadata.get("nbgrader", {})
            rerun_with_next = nbgrader.get(
                "solution"
            ) or "nbval-ignore-output" in item.cell.metadata.get("tags", [])
            if rerun_with_next:
                chosen.update({index, index + 1} & set(range(len(cells))))
        for index in sorted(chosen):
            cell = cells[index]
            rerun = type(cell).from_parent(
                parent,
                name=f"{cell.name} again",
                cell_num=cell.cell_num,
                cell=cell.cell,
                options=cell.options,
            )
            rerun.output_timeout = OUTPUT_TIMEOUT_S
            result.append(rerun)
    return result
