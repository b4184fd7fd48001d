"""The AsyncAPI 3.0 JSON Schema, for the tests that check boost-tenancy's generated documents:
`schemas/3.0.0.json` of the @asyncapi/specs npm package (the schema AsyncAPI's own parser
validates with), fetched once with `npm pack` (which checks the package's integrity) into the
project's cache (~/.cache/boost-tenancy, or XDG_CACHE_HOME)."""

from __future__ import annotations

import json
import os
import shutil
import tarfile
import tempfile
from pathlib import Path
from typing import Any, Final

from devtools.broker_settings import LocalBrokerError
from devtools.commands import run_checked

SPECS_VERSION: Final = "6.11.1"
"""@asyncapi/specs, whose schemas/3.0.0.json is the AsyncAPI 3.0.0 schema."""
SCHEMA_MEMBER: Final = "package/schemas/3.0.0.json"


def cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME", "").strip() or str(Path.home() / ".cache")
    return Path(base) / "boost-tenancy" / f"asyncapi-specs-{SPECS_VERSION}"


def asyncapi_schema() -> dict[str, Any]:
    """The AsyncAPI 3.0.0 JSON Schema (draft 7, every definition embedded by its $id)."""
    target = cache_dir() / "3.0.0.json"
    if not target.is_file():
        npm = shutil.which("npm")
        if npm is None:
            raise LocalBrokerError(
                "npm fetches the AsyncAPI schema (@asyncapi/specs): install it (Debian: "
                "apt-get install npm)"
            )
        target.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=target.parent) as work:
            run_checked(
                [npm, "pack", f"@asyncapi/specs@{SPECS_VERSION}", "--pack-destination", work],
                timeout_s=300,
                advice="the AsyncAPI schema was not fetched",
            )
            (archive,) = Path(work).glob("*.tgz")
            with tarfile.open(archive) as packed:
                member = packed.extractfile(SCHEMA_MEMBER)
                if member is None:
                    raise LocalBrokerError(f"{archive.name} holds no {SCHEMA_MEMBER}")
                partial = Path(work) / "3.0.0.json"
                partial.write_bytes(member.read())
            partial.replace(target)  # whole or not at all
    schema: dict[str, Any] = json.loads(target.read_text(encoding="utf-8"))
    return schema
