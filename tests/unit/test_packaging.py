"""What the distribution holds: the toolkit alone, and importing it pulls in no service stack.

The sample services and the local-broker manager run from the checkout; neither may reach
site-packages, and `import boost_tenancy` must not load what only the services need.
"""

from __future__ import annotations

import email
import json
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from tests.packaging_support import copy_source

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
    source = copy_source(tmp_path / "source")
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
    # The pytest fixtures users enable ship with the toolkit.
    assert "boost_tenancy/testing/pytest_plugin.py" in names

    metadata = zipfile.ZipFile(wheel).read(f"{wheel.name.split('-py')[0]}.dist-info/METADATA")
    headers = email.message_from_bytes(metadata)
    assert set(headers.get_all("Provides-Extra") or []) >= {"postgres", "redis", "testing"}
    # Installing the toolkit alone pulls in its transports and logging, nothing else.
    required = [r for r in headers.get_all("Requires-Dist") or [] if "extra ==" not in r]
    assert sorted(r.split(">")[0].split("<")[0].strip() for r in required) == [
        "python-qpid-proton",
        "stomp.py",
        "structlog",
    ]
