"""The README is the course's front page: its links and its code must be right.

The course's public home is written once, as ``[project.urls] Homepage`` in pyproject.toml;
every Binder link of the README must point at that repository.
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text()
HOME = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["urls"]["Homepage"]
NOTEBOOKS = sorted(path.name for path in (ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))


def binder_link(urlpath: str) -> str:
    owner_repo = HOME.removeprefix("https://github.com/")
    return f"https://mybinder.org/v2/gh/{owner_repo}/HEAD?urlpath={urlpath}"


def test_readme_starts_with_the_two_commands():
    first_block = README.split("```bash\n", 1)[1].split("```", 1)[0]
    commands = [line.split("#")[0].strip() for line in first_block.splitlines()]
    assert commands == ["make lab", "make test"]


def test_every_binder_link_points_at_the_course_home():
    links = re.findall(r"https://mybinder\.org/v2/gh/[^)\s\"]+", README)
    assert links, "no Binder link in README.md"
    prefix = binder_link("")
    assert all(link.startswith(prefix) for link in links), links


def test_readme_links_every_notebook_on_binder_with_its_picture():
    assert NOTEBOOKS
    for name in NOTEBOOKS:
        assert binder_link(f"lab/tree/notebooks/{name}") in README, name
        assert f"](notebooks/{name})" in README, name
        picture = f"notebooks/figures/{Path(name).stem}.png"
        assert picture in README and (ROOT / picture).is_file(), picture


def test_readme_package_example_runs():
    code = README.split("```python\n", 1)[1].split("```", 1)[0]
    namespace: dict = {}
    exec(compile(code, "README.md", "exec"), namespace)  # noqa: S102 - our own README
    ids, tok = namespace["ids"], namespace["tok"]
    assert len(ids) == 8
    assert namespace["logits"].shape == (1, 4, tok.vocab_size)
