"""What the distribution holds: the toolkit alone, and importing it pulls in no service stack.

The sample services and the local-broker manager run from the checkout; neither may reach
site-packages, and `import boost_tenancy` must not load what only the services need.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]

# The services' web, token and store clients; the toolkit imports them lazily or not at all.
SERVICE_ONLY_MODULES = frozenset({"jwt", "flask", "redis", "psycopg"})


def test_importing_the_toolkit_loads_no_jwt_flask_redis_or_psycopg(tmp_path: Path) -> None:
    # A fresh interpreter outside the checkout sees the package exactly as it is installed.
    result = subprocess.run(
        [
            sys.executable,
            "-c",
            "import boost_tenancy, json, sys; print(json.dumps(sorted(sys.modules)))",
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    loaded = {name.partition(".")[0] for name in json.loads(result.stdout)}

    assert "boost_tenancy" in loaded
    assert loaded & SERVICE_ONLY_MODULES == set()


@pytest.mark.slow
def test_the_wheel_holds_the_toolkit_alone(tmp_path: Path) -> None:
    # Built from a copy, so the build leaves nothing in the checkout; services/ and devtools/ are
    # copied too, so the wheel is built from a tree where they are present and could leak in.
    source = tmp_path / "source"
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info")
    for name in ("boost_tenancy", "services", "devtools"):
        shutil.copytree(REPO_ROOT / name, source / name, ignore=ignore)
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(REPO_ROOT / name, source / name)
    out = tmp_path / "wheel"

    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--quiet", "-w", str(out), str(source)],
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )

    (wheel,) = out.glob("boost_tenancy-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    tops = {name.partition("/")[0] for name in names}
    assert tops == {"boost_tenancy", wheel.name.split("-py")[0] + ".dist-info"}
    assert "boost_tenancy/__init__.py" in names
    assert "boost_tenancy/py.typed" in names
    assert not [name for name in names if "local_broker" in name or "activemq" in name]
    assert not [name for name in names if name.startswith("boost_tenancy/auth")]
