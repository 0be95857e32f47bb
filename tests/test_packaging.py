"""The distribution built from pyproject.toml is the library alone, with no required dependencies."""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_wheel_contains_only_the_tensorcode_library(tmp_path: Path) -> None:
    # Build from a copy: an in-tree build would leave build/ and *.egg-info in the checkout. The Django apps
    # are copied too, so the test shows the package finder leaves them out rather than never seeing them.
    source = tmp_path / "source"
    source.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(ROOT / name, source / name)
    for name in ("tensorcode", "annotate", "trainingjobs"):
        shutil.copytree(ROOT / name, source / name, ignore=shutil.ignore_patterns("__pycache__"))

    # No build isolation and no index: the build uses this environment's setuptools and needs no network.
    build = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index", "-q"]
    subprocess.run([*build, "--wheel-dir", str(tmp_path / "dist"), str(source)], check=True, timeout=120)

    (wheel,) = (tmp_path / "dist").glob("tensorcode-0.1.0-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        metadata = archive.read("tensorcode-0.1.0.dist-info/METADATA").decode()
    assert {name.split("/")[0] for name in names} == {"tensorcode", "tensorcode-0.1.0.dist-info"}
    assert "tensorcode/__init__.py" in names
    requires = [line for line in metadata.splitlines() if line.startswith("Requires-Dist:")]
    assert 'Requires-Dist: torch==2.13.0; extra == "vec"' in requires
    assert all("extra ==" in line for line in requires), requires
