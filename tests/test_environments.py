"""The dependency lists agree: pyproject.toml, environment.yml and binder/requirements.txt.

pyproject.toml keeps version ranges (so ``pip install tfscratch`` stays flexible);
constraints.txt pins the exact versions the stored notebook outputs were made with; the
conda file and Binder's requirements pin those same versions. A package added to one list and
forgotten in another fails here, not on a learner's Binder. (tests/test_binder.py installs
Binder's file for real.)
"""

from __future__ import annotations

import os
import re
import subprocess
import tomllib
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent
# What a learner's environment holds: the runtime dependencies plus the lab and test extras.
# `classroom` (nbgrader) and `dev` (ruff, pre-commit) are for instructors and maintainers.
EXTRAS_IN_ENVIRONMENTS = ("lab", "test")


def canonical(name: str) -> str:
    """PEP 503 name normalisation: ``PyYAML`` and ``pyyaml``, ``a_b`` and ``a-b`` agree."""
    return re.sub(r"[-_.]+", "-", name).lower()


def requirement_name(requirement: str) -> str:
    return canonical(re.split(r"[<>=!~;\[ ]", requirement, maxsplit=1)[0])


def pyproject_packages() -> set[str]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    requirements = list(project["dependencies"])
    for extra in EXTRAS_IN_ENVIRONMENTS:
        requirements += project["optional-dependencies"][extra]
    return {requirement_name(r) for r in requirements}


def constraint_pins() -> dict[str, str]:
    pins = {}
    for line in (ROOT / "constraints.txt").read_text().splitlines():
        line = line.split("#")[0].strip()
        if line:
            name, version = line.split("==")
            pins[canonical(name)] = version
    return pins


def conda_pins(path: Path) -> dict[str, str]:
    """Package -> pinned version from an environment file (conda and pip sections)."""
    environment = yaml.safe_load(path.read_text())
    pins = {}
    for entry in environment["dependencies"]:
        if isinstance(entry, dict):  # the `- pip:` section
            for requirement in entry["pip"]:
                if requirement.startswith("-e"):
                    continue
                name, _, version = requirement.partition("==")
                pins[canonical(name)] = version
        else:
            name, _, version = entry.partition("=")
            pins[canonical(name)] = version
    return pins


ENVIRONMENT_FILES = [ROOT / "environment.yml"]
BINDER_REQUIREMENTS = ROOT / "binder" / "requirements.txt"


def requirements_pins(path: Path) -> dict[str, str]:
    """Package -> pinned version from a pip requirements file (every line must pin)."""
    pins = {}
    for line in path.read_text().splitlines():
        line = line.split("#")[0].strip()
        if line:
            name, separator, version = line.partition("==")
            assert separator, f"{path.name}: {line!r} is not pinned with =="
            pins[canonical(name)] = version
    return pins


@pytest.mark.parametrize("path", ENVIRONMENT_FILES, ids=lambda p: str(p.relative_to(ROOT)))
def test_environment_file_lists_exactly_the_pyproject_packages(path):
    listed = set(conda_pins(path)) - {"python", "pip"}
    expected = pyproject_packages()
    assert listed == expected, (
        f"{path.name}: missing {sorted(expected - listed)}, not in pyproject {sorted(listed - expected)}"
    )


@pytest.mark.parametrize("path", ENVIRONMENT_FILES, ids=lambda p: str(p.relative_to(ROOT)))
def test_environment_file_pins_the_versions_of_constraints_txt(path):
    pins, constraints = conda_pins(path), constraint_pins()
    wrong = {
        name: (version, constraints.get(name))
        for name, version in pins.items()
        if name not in ("python", "pip") and version != constraints.get(name)
    }
    assert not wrong, f"{path.name}: pinned (here, constraints.txt): {wrong}"


@pytest.mark.parametrize("path", ENVIRONMENT_FILES, ids=lambda p: str(p.relative_to(ROOT)))
def test_environment_file_pins_python_within_requires_python(path):
    requires = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["requires-python"]
    minimum = tuple(int(part) for part in requires.removeprefix(">=").split("."))
    version = tuple(int(part) for part in conda_pins(path)["python"].split("."))
    assert version >= minimum


def test_every_pyproject_package_is_pinned_in_constraints_txt():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    requirements = list(project["dependencies"])
    for extra_requirements in project["optional-dependencies"].values():
        requirements += extra_requirements
    unpinned = {requirement_name(r) for r in requirements} - set(constraint_pins())
    assert not unpinned, f"not pinned in constraints.txt: {sorted(unpinned)}"


def test_binder_requirements_pin_the_versions_of_constraints_txt():
    pins, constraints = requirements_pins(BINDER_REQUIREMENTS), constraint_pins()
    wrong = {
        name: (v, constraints.get(name)) for name, v in pins.items() if v != constraints.get(name)
    }
    assert not wrong, f"binder/requirements.txt pinned (here, constraints.txt): {wrong}"


def test_binder_requirements_hold_the_learners_packages_and_no_instructor_tools():
    pins = requirements_pins(BINDER_REQUIREMENTS)
    missing = pyproject_packages() - set(pins)
    assert not missing, f"binder/requirements.txt misses {sorted(missing)}"
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    for extra in ("classroom", "dev", "browser"):
        tools = {requirement_name(r) for r in project["optional-dependencies"][extra]}
        assert not tools & set(pins), f"Binder would install the {extra} extra: {tools & set(pins)}"


def test_binder_uses_pip_with_the_python_of_the_environment_file():
    # With binder/ present repo2docker ignores the root files; a binder/environment.yml
    # would select its conda build instead of pip.
    assert not (ROOT / "binder" / "environment.yml").exists()
    runtime = (ROOT / "binder" / "runtime.txt").read_text().strip()
    assert runtime == f"python-{conda_pins(ROOT / 'environment.yml')['python']}"


def test_binder_post_build_installs_the_repository_without_dependencies():
    post_build = (ROOT / "binder" / "postBuild").read_text().splitlines()
    commands = [line.strip() for line in post_build if line.strip() and not line.startswith("#")]
    assert commands[0] == "set -e"
    assert "pip install --no-deps -e ." in commands
    assert (ROOT / "binder" / "postBuild").stat().st_mode & 0o111, "postBuild must be executable"


def test_binder_start_gives_numpy_one_blas_thread_and_runs_the_server_command():
    start = ROOT / "binder" / "start"
    assert start.stat().st_mode & 0o111, "binder/start must be executable"
    env = {
        key: value
        for key, value in os.environ.items()
        if key not in ("OPENBLAS_NUM_THREADS", "JUPYTER_CONFIG_PATH")
    }
    result = subprocess.run(
        [str(start), "sh", "-c", 'echo "$OPENBLAS_NUM_THREADS:$0:$JUPYTER_CONFIG_PATH"', "server"],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    # the variables are set, then the command runs as given; the Lab is the learner's
    assert result.stdout == f"1:server:{ROOT / 'jupyter' / 'learner'}\n"
