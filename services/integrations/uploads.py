"""Reading an upload: its bytes within the size limit, a safe file name and its media type.

Both a multipart form's `file` field and a raw body with an X-File-Name header are accepted.
"""

from __future__ import annotations

import re
import unicodedata
from typing import Final
from urllib.parse import unquote

from flask import request
from werkzeug.exceptions import RequestEntityTooLarge

from services.integrations.errors import ApiError

MAX_FILE_NAME: Final = 255
_EXTENSION_TYPES: Final = {
    "pdf": "application/pdf",
    "txt": "text/plain",
    "html": "text/html",
    "htm": "text/html",
    "docx": "application/vnd.openxmlformats-officedocument.wordprocessingml.document",
    "png": "image/png",
    "jpg": "image/jpeg",
    "jpeg": "image/jpeg",
}
# Types a client sends when it does not know better (curl --data-binary sends the form type):
# they say nothing about the file, so the extension decides.
_GENERIC_TYPES: Final = frozenset(
    {"", "application/octet-stream", "binary/octet-stream", "application/x-www-form-urlencoded"}
)
_MEDIA_TYPE_RE: Final = re.compile(
    r"[a-z0-9][a-z0-9!#$&^_.+-]{0,63}/[a-z0-9][a-z0-9!#$&^_.+-]{0,126}"
)


def _clean_file_name(raw: str | None, *, percent_encoded: bool) -> str:
    """The last path segment of a client's file name, without control characters."""
    name = unquote(raw, errors="strict") if raw and percent_encoded else (raw or "")
    name = name.replace("\\", "/").rsplit("/", 1)[-1]
    name = "".join(ch for ch in name if not unicodedata.category(ch).startswith("C")).strip()
    if not name or name in {".", ".."}:
        raise ApiError(400, "bad_request", "missing file name")
    if len(name) > MAX_FILE_NAME:
        raise ApiError(400, "bad_request", f"file name longer than {MAX_FILE_NAME} characters")
    return name


def detect_content_type(declared: str | None, file_name: str) -> str:
    """The declared media type unless it is generic or malformed, else the extension's type."""
    media = (declared or "").split(";", 1)[0].strip().lower()
    if media not in _GENERIC_TYPES and _MEDIA_TYPE_RE.fullmatch(media):
        return media
    _, dot, extension = file_name.rpartition(".")
    guessed = _EXTENSION_TYPES.get(extension.lower()) if dot else None
    return guessed or "application/octet-stream"


def wants_thumbnail(content_type: str) -> bool:
    return content_type.startswith("image/") or content_type == "application/pdf"


def read_upload(limit: int) -> tuple[bytes, str, str]:
    """The uploaded bytes, file name and declared media type, within the size limit."""
    if request.mimetype == "multipart/form-data":
        upload = request.files.get("file")
        if upload is None:
            raise ApiError(400, "bad_request", "missing multipart field 'file'")
        data = upload.stream.read(limit + 1)
        name = _clean_file_name(upload.filename, percent_encoded=False)
        declared = upload.mimetype
    else:
        if request.content_length is not None and request.content_length > limit:
            raise RequestEntityTooLarge()
        data = request.stream.read(limit + 1)
        try:
            name = _clean_file_name(request.headers.get("X-File-Name"), percent_encoded=True)
        except UnicodeDecodeError:
            raise ApiError(400, "bad_request", "X-File-Name is not UTF-8") from None
        declared = request.mimetype
    if len(data) > limit:
        raise RequestEntityTooLarge()
    if not data:
        raise ApiError(400, "bad_request", "the upload is empty")
    return data, name, declared
