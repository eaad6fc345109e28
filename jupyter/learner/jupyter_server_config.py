"""The learner's Jupyter server: `make lab` puts jupyter/learner/ first on JUPYTER_CONFIG_PATH.

Opening a notebook must not change it. The course's notebooks are stored without the Python
patch version their kernel ran (``language_info.version``: 3.11.7 on one machine, 3.11.9 on
the next), but JupyterLab writes the ``language_info`` of the kernel it starts into every
notebook it opens. A notebook would then open as modified, JupyterLab would autosave it, and
``git status`` of a learner who only read would list it.

So this server hands each notebook out with the version of the Python it runs (the venv's,
which is also the kernel's: JupyterLab then finds nothing to change), and takes the version
out again when it saves: a notebook a learner only opened stays byte for byte the same, and one
they worked in differs only by their work.
"""

import sys

from jupyter_server.services.contents.largefilemanager import AsyncLargeFileManager

# As ipykernel reports it in its kernel_info reply (``language_info.version``).
KERNEL_PYTHON_VERSION = sys.version.split()[0]


def with_kernel_version(notebook: dict) -> None:
    """Give a stored Python notebook the version the kernel will report (in place)."""
    language = notebook.get("metadata", {}).get("language_info")
    if language and language.get("name") == "python" and "version" not in language:
        language["version"] = KERNEL_PYTHON_VERSION


def without_version(notebook: dict) -> None:
    """Drop the Python version, which differs from machine to machine (in place)."""
    notebook.get("metadata", {}).get("language_info", {}).pop("version", None)


class LearnerContentsManager(AsyncLargeFileManager):
    """JupyterLab's default contents manager, with notebooks' Python version handled as above."""

    async def get(self, path, content=True, type=None, format=None, **kwargs):
        model = await super().get(path, content=content, type=type, format=format, **kwargs)
        if model["type"] == "notebook" and model.get("content"):
            with_kernel_version(model["content"])
        return model

    async def save(self, model, path=""):
        if model.get("type") == "notebook" and model.get("content"):
            without_version(model["content"])
        return await super().save(model, path)


c = get_config()  # noqa: F821 (traitlets provides it to a config file)
c.ServerApp.contents_manager_class = LearnerContentsManager
