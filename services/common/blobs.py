"""A tenant-scoped blob store in a local folder: every key lives under its tenant's directory.

Keys are relative, made of safe segments; a key can never reach outside its tenant's folder,
whatever it contains. An unreachable store raises TransientError (the message is retried).
"""

from __future__ import annotations

import os
import re
import tempfile
from pathlib import Path
from typing import Final

from boost_tenancy import ConfigError, PermanentError, TenantId, TransientError

_SEGMENT_RE: Final = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")


def check_key(key: str) -> tuple[str, ...]:
    """Split a blob key into safe path segments; '..', absolute paths and odd names refused."""
    parts = tuple(key.split("/"))
    if not key or len(parts) > 8 or any(_SEGMENT_RE.fullmatch(p) is None for p in parts):
        raise PermanentError(f"invalid blob key {key!r}")
    if any(p in {".", ".."} for p in parts):
        raise PermanentError(f"invalid blob key {key!r}")
    return parts


class LocalBlobStore:
    """Blobs under <root>/<tenant>/<key>; writes are atomic (temporary file, then rename)."""

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self._root = Path(root)
        if not str(root):
            raise ConfigError("blob store root is empty")

    def _path(self, tenant: TenantId, key: str) -> Path:
        return self._root.joinpath(TenantId.parse(tenant).value, *check_key(key))

    def _require_root(self) -> None:
        if not self._root.is_dir():
            raise TransientError(f"blob store {str(self._root)!r} is not available")

    def put(self, tenant: TenantId, key: str, data: bytes) -> None:
        """Store data under the tenant's key, replacing what was there."""
        target = self._path(tenant, key)
        self._require_root()
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=".upload-")
            with os.fdopen(fd, "wb") as handle:
                handle.write(data)
            os.replace(tmp, target)
        except OSError as exc:
            raise TransientError(f"cannot write blob {key!r}: {exc}") from exc

    def get(self, tenant: TenantId, key: str) -> bytes:
        """The tenant's blob; a missing blob is permanent, an unreachable store transient."""
        target = self._path(tenant, key)
        self._require_root()
        try:
            return target.read_bytes()
        except FileNotFoundError as exc:
            raise PermanentError(f"blob {key!r} of tenant {tenant} does not exist") from exc
        except OSError as exc:
            raise TransientError(f"cannot read blob {key!r}: {exc}") from exc

    def exists(self, tenant: TenantId, key: str) -> bool:
        return self._path(tenant, key).is_file()


def document_key(document: str, name: str) -> str:
    """documents/<document>/<name>: where a document's original, text and thumbnail live."""
    return f"documents/{document}/{name}"
