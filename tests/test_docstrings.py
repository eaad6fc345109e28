"""help() answers a learner: every public class and function of the package says what its
arguments are and what it returns (``Args:`` / ``Returns:``, with shapes), so ``help(
tfscratch.DecoderLM)`` or ``help(tfscratch.generate)`` is enough to call it."""

import importlib
import inspect
import pkgutil

import matplotlib

matplotlib.use("Agg")  # headless: the widgets and viz modules import pyplot

import pytest

import tfscratch


def package_modules() -> list[str]:
    return ["tfscratch"] + [
        info.name for info in pkgutil.walk_packages(tfscratch.__path__, prefix="tfscratch.")
    ]


def arguments(function) -> list[str]:
    try:
        parameters = inspect.signature(function).parameters
    except (TypeError, ValueError):
        return []
    return [name for name in parameters if name not in ("self", "cls")]


def documents_arguments(doc: str) -> bool:
    return any(section in doc for section in ("Args:", "Attributes:"))


def undocumented(module_name: str) -> list[str]:
    """Public functions, classes and methods of one module with arguments but no ``Args:``
    (a class documents its constructor's arguments; a dataclass may list ``Attributes:``)."""
    module = importlib.import_module(module_name)
    missing = []
    for name, obj in vars(module).items():
        if name.startswith("_") or getattr(obj, "__module__", None) != module_name:
            continue
        if inspect.isfunction(obj):
            doc = inspect.getdoc(obj) or ""
            if not doc or (arguments(obj) and not documents_arguments(doc)):
                missing.append(f"{module_name}.{name}")
        elif inspect.isclass(obj):
            doc = inspect.getdoc(obj) or ""
            init = vars(obj).get("__init__")
            init_doc = inspect.getdoc(init) if init else ""
            if not doc or (
                init and arguments(init) and not documents_arguments(doc + (init_doc or ""))
            ):
                missing.append(f"{module_name}.{name}")
            for method_name, method in vars(obj).items():
                if method_name.startswith("_") or not inspect.isfunction(method):
                    continue
                method_doc = inspect.getdoc(method) or ""
                if not method_doc or (arguments(method) and "Args:" not in method_doc):
                    missing.append(f"{module_name}.{name}.{method_name}")
    return missing


@pytest.mark.parametrize("module_name", package_modules())
def test_every_public_class_and_function_documents_its_arguments(module_name):
    assert undocumented(module_name) == []


def test_help_on_the_models_and_generate_names_every_argument():
    for function in (tfscratch.DecoderLM, tfscratch.generate, tfscratch.translate):
        doc = inspect.getdoc(function)
        init = function.__init__ if inspect.isclass(function) else function
        for argument in arguments(init):
            assert f"{argument}:" in doc or f"{argument}," in doc, (function, argument)
        assert "Returns:" in doc or inspect.isclass(function)
