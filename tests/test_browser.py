"""The course in a real browser: `make lab`, headless Chromium, every notebook run in JupyterLab.

What a learner sees is JupyterLab, not nbclient, so this test starts the Makefile's `make lab`
(on a copy of notebooks/, so nothing in the repository is rewritten), opens each notebook
in the system's Chromium (Debian's chromium and chromium-driver, driven by Selenium), runs
all cells and checks:

* opening a notebook does not modify it: JupyterLab finds nothing to change once the kernel
  has started, and the notebook saved right after opening is byte for byte the stored one;
* no cell ends in an error, and the browser console has no SEVERE entry;
* every widget output renders as a widget (no "Loading widget...", no text repr, no
  "Error displaying widget") and shows once: its static view stays out of JupyterLab;
  moving a slider changes what the widget shows; the playground says "press Enter" and its
  error for an unknown symbol lists the symbols the model knows; the attention explorer fits
  a laptop screen;
* the learner's Lab has no nbgrader interface even though nbgrader is in the venv, starts
  without the "Jupyter news" notification, and its file browser shows only the course.

A screenshot of each notebook (and of the learner's Lab, the playground's error and the
attention explorer) is saved in build/browser/. `make test-browser` runs this
file (it is marked `lab`, which `make test` leaves out); `.ci/run` installs Chromium first.
"""

from __future__ import annotations

import importlib.util
import shutil
import time
from pathlib import Path

import pytest

from .lab_server import ROOT, LabServer

pytestmark = pytest.mark.lab

CHROMIUM = Path("/usr/bin/chromium")
CHROMEDRIVER = Path("/usr/bin/chromedriver")
SCREENSHOTS = ROOT / "build" / "browser"
NOTEBOOKS = sorted(path.name for path in (ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
RUN_ALL_TIMEOUT_S = 900  # notebook 07 trains for about 2.5 minutes on two quiet cores
WIDGET_MIME = "application/vnd.jupyter.widget-view+json"
# What JupyterLab renders a widget output's static fallback with, had it not chosen the widget
# (its rendered node then carries data-mime-type; the widget's own renderer carries none).
FALLBACK_MIMES = ("text/plain", "text/html", "image/png")
# What the learner's file browser may show: the notebooks, their figures and a README.
COURSE_FOLDER = {"figures", "README.md", *NOTEBOOKS}
# A laptop screen is about 768 px tall; JupyterLab's bars leave a cell about 650 px of it.
LAPTOP_CELL_HEIGHT_PX = 560
# Flags for headless Chromium as root on a machine without a network: no sandbox (root),
# and none of the background connections (updates, sync) it would otherwise keep trying.
CHROMIUM_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
    "--window-size=1400,1000",
)


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    scratch = tmp_path_factory.mktemp("lab")
    lab_dir = scratch / "notebooks"
    shutil.copytree(
        ROOT / "notebooks",
        lab_dir,
        ignore=shutil.ignore_patterns(".ipynb_checkpoints", "__pycache__"),
    )
    # expose_app_in_browser gives the test `window.jupyterapp`, JupyterLab's own command API.
    # Every cell of a notebook in the page (JupyterLab otherwise renders only the cells near
    # the viewport). Nothing else is set: the "Jupyter news" question must stay away because
    # of the learner's own configuration (jupyter/learner/), as on a learner's first start.
    settings = scratch / "settings" / "@jupyterlab"
    (settings / "notebook-extension").mkdir(parents=True)
    (settings / "notebook-extension" / "tracker.jupyterlab-settings").write_text(
        '{"windowingMode": "none"}'
    )
    server = LabServer(lab_dir, scratch, extra_args="--LabApp.expose_app_in_browser=True")
    server.lab_dir = lab_dir
    server.start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    assert CHROMIUM.exists() and CHROMEDRIVER.exists(), (
        "the browser tests need Debian's chromium and chromium-driver "
        "(apt-get install chromium chromium-driver; .ci/run installs them)"
    )
    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for flag in CHROMIUM_FLAGS:
        options.add_argument(flag)
    options.add_argument(f"--user-data-dir={tmp_path_factory.mktemp('chromium-profile')}")
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(options=options, service=Service(str(CHROMEDRIVER)))
    driver.set_script_timeout(60)
    yield driver
    driver.quit()


def severe_console_entries(driver) -> list[str]:
    return [entry["message"] for entry in driver.get_log("browser") if entry["level"] == "SEVERE"]


def wait_for(condition, timeout: float, what: str, interval: float = 0.25):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")


def open_notebook(driver, lab, name: str) -> None:
    # ?reset: a fresh workspace, so the notebooks closed before are not restored (with kernels)
    driver.get(f"{lab.url}/lab/tree/{name}?reset&token={lab.token}")
    ready = """
        const app = window.jupyterapp;
        const panel = app && app.shell.currentWidget;
        const kernel = panel && panel.sessionContext && panel.sessionContext.session
            && panel.sessionContext.session.kernel;
        return !!(panel && panel.context && panel.context.isReady
            && panel.context.path.endsWith(arguments[0])
            && kernel && kernel.status === 'idle');
    """
    wait_for(lambda: driver.execute_script(ready, name), 120, f"{name} and its kernel")


def run_all_cells(driver) -> None:
    """Run every cell through JupyterLab's own command and wait until the last one is done."""
    # The command's promise settles when the last cell has run; a notebook can take minutes,
    # longer than one WebDriver call may last, so the page records the outcome and the test
    # polls it.
    driver.execute_script(
        """
        window.runAllOutcome = 'running';
        window.jupyterapp.commands.execute('notebook:run-all-cells').then(
            () => { window.runAllOutcome = 'ok'; },
            (error) => { window.runAllOutcome = 'failed: ' + error; });
        """
    )
    outcome = wait_for(
        lambda: driver.execute_script(
            "return window.runAllOutcome === 'running' ? null : window.runAllOutcome;"
        ),
        RUN_ALL_TIMEOUT_S,
        "Run All to finish",
        interval=1.0,
    )
    assert outcome == "ok", outcome
    idle = """
        const panel = window.jupyterapp.shell.currentWidget;
        const kernel = panel.sessionContext.session.kernel;
        const cells = panel.content.widgets.filter((cell) => cell.model.type === 'code');
        const running = cells.filter((cell) => cell.model.executionState === 'running');
        return kernel.status === 'idle' && running.length === 0;
    """
    wait_for(lambda: driver.execute_script(idle), 120, "the kernel to finish")


def cell_errors(driver) -> list[str]:
    return driver.execute_script(
        """
        const panel = window.jupyterapp.shell.currentWidget;
        const errors = [];
        panel.content.widgets.forEach((cell, index) => {
            if (cell.model.type !== 'code') return;
            const outputs = cell.model.outputs.toJSON();
            if (cell.model.executionCount === null && cell.model.sharedModel.source.trim())
                errors.push(`cell ${index} did not run`);
            outputs.filter((out) => out.output_type === 'error').forEach((out) =>
                errors.push(`cell ${index}: ${out.ename}: ${out.evalue}`));
        });
        return errors;
        """
    )


def widget_outputs(driver) -> list[dict]:
    """Each output that holds a widget: whether it rendered as one, and its text."""
    return driver.execute_script(
        """
        const panel = window.jupyterapp.shell.currentWidget;
        const found = [];
        panel.content.widgets.forEach((cell, index) => {
            if (cell.model.type !== 'code') return;
            const outputs = cell.model.outputs.toJSON();
            const areas = cell.outputArea.node.querySelectorAll(
                ':scope > .jp-OutputArea-child > .jp-OutputArea-output');
            outputs.forEach((out, k) => {
                if (!out.data || !(arguments[0] in out.data)) return;
                const node = areas[k];
                found.push({
                    cell: index,
                    mime: node ? node.getAttribute('data-mime-type') : null,
                    rendered: !!(node && node.querySelector('.jupyter-widgets')),
                    text: node ? node.innerText : '',
                });
            });
        });
        return found;
        """,
        WIDGET_MIME,
    )


def check_opening_changes_nothing(driver, lab, name: str, stored: bytes) -> None:
    """Once the kernel has told JupyterLab its language_info (with its Python version), the
    notebook is not modified, and saving it writes back exactly what was stored."""
    state = driver.execute_async_script(
        """
        const done = arguments[arguments.length - 1];
        const panel = window.jupyterapp.shell.currentWidget;
        panel.sessionContext.session.kernel.info.then((info) => setTimeout(() => done({
            dirty: panel.model.dirty,
            kernel_version: info.language_info.version,
            language_info: panel.model.getMetadata('language_info'),
        }), 1000));
        """
    )
    assert state["language_info"].get("version") == state["kernel_version"], state
    assert state["dirty"] is False, f"{name} opens as modified: {state}"
    driver.execute_async_script(
        """
        const done = arguments[arguments.length - 1];
        window.jupyterapp.shell.currentWidget.context.save().then(() => done(), done);
        """
    )
    assert (lab.lab_dir / name).read_bytes() == stored, f"{name} changed by opening and saving"


def check_widgets_show_once(driver, name: str) -> None:
    """A cell with a tfscratch widget has one output, rendered as the widget: the static view
    in the same bundle is for pages without a kernel and never shows in JupyterLab."""
    cells = driver.execute_script(
        """
        const panel = window.jupyterapp.shell.currentWidget;
        const found = [];
        panel.content.widgets.forEach((cell, index) => {
            if (cell.model.type !== 'code') return;
            const outputs = cell.model.outputs.toJSON();
            if (!outputs.some((out) => out.metadata && out.metadata.tfscratch)) return;
            const nodes = [...cell.outputArea.node.querySelectorAll(
                ':scope > .jp-OutputArea-child > .jp-OutputArea-output')];
            found.push({
                cell: index,
                outputs: outputs.length,
                mimes: nodes.map((node) => node.getAttribute('data-mime-type')),
                widgets: nodes.filter((node) => node.querySelector('.jupyter-widgets')).length,
                text: cell.outputArea.node.innerText,
            });
        });
        return found;
        """
    )
    assert cells, f"{name}: no tfscratch widget output"
    for cell in cells:
        assert cell["outputs"] == 1 and cell["widgets"] == 1, cell
        assert not set(cell["mimes"]) & set(FALLBACK_MIMES), cell
        assert "Static view" not in cell["text"], cell


def check_the_explorer_fits_a_laptop_screen(driver, name: str) -> None:
    widget = driver.execute_script(
        """
        const nodes = [...document.querySelectorAll('.jp-OutputArea-output .jupyter-widgets')];
        return nodes.find((node) => node.querySelector('img') && node.querySelector('select'))
            || null;
        """
    )
    if widget is None:
        return
    driver.execute_script("arguments[0].scrollIntoView({block: 'start'});", widget)
    height = driver.execute_script("return arguments[0].getBoundingClientRect().height;", widget)
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    driver.save_screenshot(str(SCREENSHOTS / f"{Path(name).stem}_attention_explorer.png"))
    assert 0 < height <= LAPTOP_CELL_HEIGHT_PX, f"{name}: the explorer is {height:.0f} px tall"


def close_notebook(driver) -> None:
    """Shut the kernel down (as Binder learners are told to), save the copy and close it.

    Saved, the page has no unsaved work, so leaving it for the next notebook raises no
    "leave the page?" prompt (which Chromium would log as a SEVERE console entry).
    """
    driver.execute_async_script(
        """
        const done = arguments[arguments.length - 1];
        const panel = window.jupyterapp.shell.currentWidget;
        panel.sessionContext.shutdown()
            .then(() => panel.context.save())
            .then(() => { panel.dispose(); done(); }, (error) => done(String(error)));
        """
    )


def has_controls(name: str) -> bool:
    """Whether the notebook shows one of tfscratch's widgets with sliders."""
    source = (ROOT / "notebooks" / name).read_text()
    return "SamplingPlayground(" in source or "AttentionExplorer(" in source


def check_a_control_changes_the_output(driver, name: str) -> None:
    """Type a prompt in the widget's text box, then press → on its "samples" slider: the
    widget's output (its HTML part, the sampled names) must follow each change."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys

    widget = driver.execute_script(
        """
        const nodes = [...document.querySelectorAll('.jp-OutputArea-output .jupyter-widgets')];
        return nodes.find((node) => node.querySelector('.noUi-handle')) || null;
        """
    )
    assert widget is not None, f"{name}: no widget with a slider on the page"
    driver.execute_script("arguments[0].scrollIntoView({block: 'start'});", widget)
    # The sampled names: the last HTML part of the widget (the first is the "press Enter" hint).
    output = widget.find_elements(By.CSS_SELECTOR, ".widget-html-content")[-1]

    # After Run All the playground is back at its first settings (no prompt): a typed
    # prompt must bring back names that start with it.
    def names():  # read in one script: the list is re-rendered on every update
        return driver.execute_script(
            "return [...arguments[0].querySelectorAll('li')].map((li) => li.innerText.trim());",
            output,
        )

    boxes = widget.find_elements(By.CSS_SELECTOR, ".widget-text")
    prompts = [box for box in boxes if box.text.strip().startswith("prompt")]
    assert prompts, f"{name}: no 'prompt' box in {[box.text for box in boxes]}"
    assert "press Enter" in widget.text, f"{name}: no hint that the prompt box needs Enter"
    prompt = prompts[0].find_element(By.CSS_SELECTOR, "input")

    # A symbol the model does not know: the message says which symbols it does know, and
    # nothing about options a widget user cannot set.
    prompt.clear()
    prompt.send_keys("Ma", Keys.ENTER)
    message = wait_for(
        lambda: "cannot be encoded" in output.text and output.text,
        30,
        f"{name}: the error for the prompt 'Ma'",
    )
    assert "'M' is not among the" in message and "abcdefghijklmnopqrstuvwxyz" in message, message
    assert "unknown=" not in message, message
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    driver.save_screenshot(str(SCREENSHOTS / f"{Path(name).stem}_playground_error.png"))

    prompt.clear()
    prompt.send_keys("ma", Keys.ENTER)
    wait_for(
        lambda: names() and all(sample.startswith("ma") for sample in names()),
        30,
        f"{name}: names starting with the new prompt 'ma'",
    )

    # The "samples" slider (n): one step to the right, one more name in the list.
    count = len(names())
    sliders = widget.find_elements(By.CSS_SELECTOR, ".widget-slider")
    labelled = [s for s in sliders if "samples" in s.text]
    assert labelled, f"{name}: no 'samples' slider in {[s.text for s in sliders]}"
    handle = labelled[0].find_element(By.CSS_SELECTOR, ".noUi-handle")
    handle.click()
    handle.send_keys(Keys.ARROW_RIGHT)
    wait_for(lambda: len(names()) == count + 1, 30, f"{name}: {count + 1} names after the slider")


def screenshot_lab(driver, name: str) -> None:
    """Screenshot of the Lab once the file browser's items are laid out."""
    wait_for(
        lambda: driver.execute_script(
            "const item = document.querySelector('.jp-DirListing-item');"
            "return !!(item && item.getBoundingClientRect().height > 0);"
        ),
        60,
        "the file browser",
    )
    time.sleep(1)  # let the page paint
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    driver.save_screenshot(str(SCREENSHOTS / name))


def open_lab(driver, lab) -> None:
    driver.get(f"{lab.url}/lab?reset&token={lab.token}")
    wait_for(lambda: driver.execute_script("return !!window.jupyterapp"), 60, "JupyterLab")
    driver.execute_async_script(
        "const done = arguments[arguments.length - 1]; window.jupyterapp.restored.then(done);"
    )


def test_learner_lab_starts_without_the_news_notification(lab, browser):
    """A fresh Lab asks "Would you like to get notified about official Jupyter news?" in a
    notification; the learner's configuration turns that feature off."""
    open_lab(browser, lab)
    time.sleep(5)  # the question would come shortly after the Lab is restored
    toasts = browser.execute_script(
        "return [...document.querySelectorAll('.Toastify__toast')].map((t) => t.innerText);"
    )
    screenshot_lab(browser, "00_no_news_notification.png")
    assert not [toast for toast in toasts if "news" in toast.lower()], toasts
    announcements = "@jupyterlab/apputils-extension:announcements"
    assert not browser.execute_script(
        "return window.jupyterapp.isPluginActivated(arguments[0]);", announcements
    )


def test_learner_file_browser_shows_only_the_course(lab, browser):
    open_lab(browser, lab)
    items = wait_for(
        lambda: browser.execute_script(
            "return [...document.querySelectorAll('.jp-DirListing-item .jp-DirListing-itemName')]"
            ".map((item) => item.innerText.trim());"
        ),
        60,
        "the file browser",
    )
    screenshot_lab(browser, "00_file_browser.png")
    assert set(items) == COURSE_FOLDER, sorted(set(items) ^ COURSE_FOLDER)


def test_learner_lab_shows_no_nbgrader(lab, browser):
    assert importlib.util.find_spec("nbgrader"), "nbgrader must be in the venv for this test"
    browser.get(f"{lab.url}/lab?token={lab.token}")
    wait_for(lambda: browser.execute_script("return !!window.jupyterapp"), 60, "JupyterLab")
    wait_for(
        lambda: browser.execute_script(
            "return document.querySelectorAll('.lm-MenuBar-itemLabel').length > 3"
        ),
        60,
        "the menu bar",
    )
    plugins = browser.execute_script(
        "return window.jupyterapp.listPlugins().filter("
        "(id) => window.jupyterapp.isPluginActivated(id));"
    )
    assert plugins and not [p for p in plugins if "nbgrader" in p]
    menus = browser.execute_script(
        "return [...document.querySelectorAll('.lm-MenuBar-itemLabel')].map((e) => e.innerText);"
    )
    assert "Nbgrader" not in menus, menus
    page = browser.find_element("tag name", "body").text
    assert "Create Assignment" not in page and "Formgrader" not in page
    wait_for(
        lambda: browser.execute_script(
            "return document.querySelectorAll('.jp-DirListing-item').length > 0"
        ),
        60,
        "the file browser",
    )
    screenshot_lab(browser, "00_learner_lab.png")
    assert lab.api("/formgrader")[0] == 404  # nbgrader's server extensions are off too
    server_lines = [line for line in lab.log().splitlines() if line.startswith("[")]
    assert not [line for line in server_lines if "nbgrader" in line.lower()], server_lines


@pytest.mark.parametrize("name", NOTEBOOKS)
def test_notebook_runs_in_jupyterlab(lab, browser, name):
    browser.get_log("browser")  # start this notebook with an empty console log
    stored = (lab.lab_dir / name).read_bytes()
    open_notebook(browser, lab, name)
    try:
        check_opening_changes_nothing(browser, lab, name, stored)
        run_all_cells(browser)
        assert cell_errors(browser) == []
        widgets = widget_outputs(browser)
        for widget in widgets:
            assert widget["rendered"], f"{name}: a widget did not render: {widget}"
            assert widget["mime"] not in FALLBACK_MIMES, widget  # the widget, not its fallback
            assert "Loading widget" not in widget["text"], widget
            assert "Error displaying widget" not in widget["text"], widget
        if has_controls(name):
            assert widgets, f"{name}: its widget did not appear"
            check_widgets_show_once(browser, name)
            check_the_explorer_fits_a_laptop_screen(browser, name)
            check_a_control_changes_the_output(browser, name)
        SCREENSHOTS.mkdir(parents=True, exist_ok=True)
        browser.save_screenshot(str(SCREENSHOTS / f"{Path(name).stem}.png"))
        severe = severe_console_entries(browser)
        assert not severe, "SEVERE browser console entries:\n" + "\n".join(severe)
    finally:
        close_notebook(browser)
