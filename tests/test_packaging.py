"""The distribution as a user installs it: a name free on PyPI (`graphkit` is another
project's), an SPDX license, the web assets inside, and a build that warns about nothing."""

from __future__ import annotations

import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_distribution_name_and_spdx_license() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert project["name"] == "graphkit-hitl"
    assert project["license"] == "MIT"  # an SPDX expression, not a deprecated table
    assert "pip install graphkit-hitl" in (ROOT / "README.md").read_text()


def test_the_wheel_builds_without_warnings_and_ships_the_web_assets(tmp_path: Path) -> None:
    built = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(tmp_path),
         str(ROOT)], capture_output=True, text=True, timeout=600, check=False)
    assert built.returncode == 0, built.stderr
    ours = [line for line in (built.stdout + built.stderr).splitlines()
            if "warning" in line.lower() and "Location 'file:" not in line]
    assert not ours, ours
    (wheel,) = tmp_path.glob("graphkit_hitl-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    assert {"graphkit/py.typed", "graphkit/web/static/app.css",
            "graphkit/web/static/app.js"} <= names
    assert not any(n.startswith(("tests/", "graphs/", "benchmarks/")) for n in names)
