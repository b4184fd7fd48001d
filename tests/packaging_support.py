"""A copy of the project's source to build or install from, so a build leaves nothing (build/,
*.egg-info) in the checkout; services/ and devtools/ come along, so a packaging mistake that
would ship them shows."""

from __future__ import annotations

import shutil
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]


def copy_source(destination: Path) -> Path:
    """The project's packaging inputs copied into destination; returns destination."""
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info")
    for name in ("boost_tenancy", "services", "devtools"):
        shutil.copytree(REPO_ROOT / name, destination / name, ignore=ignore)
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(REPO_ROOT / name, destination / name)
    return destination
