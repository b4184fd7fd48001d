"""Plain text from a document's bytes: PDF, plain text, HTML and DOCX, chosen by content type.

Pure functions without I/O; a document that yields no text is an ExtractionError, not a crash.
"""

from __future__ import annotations

import codecs
import enum
import io
import re
import zipfile
from collections.abc import Callable
from html.parser import HTMLParser
from pathlib import PurePosixPath
from typing import Final

MAX_INPUT_BYTES: Final = 20 * 1024 * 1024
MAX_TEXT_CHARS: Final = 5_000_000
MAX_PDF_PAGES: Final = 2_000
# A DOCX is a zip: its members are inflated in memory by python-docx, so the declared
# uncompressed size and ratio are checked before it is opened.
MAX_DOCX_UNPACKED_BYTES: Final = 200 * 1024 * 1024
MAX_DOCX_RATIO: Final = 200

PDF: Final = "application/pdf"
TEXT: Final = "text/plain"
HTML: Final = "text/html"
DOCX: Final = "application/vnd.openxmlformats-officedocument.wordprocessingml.document"


class ExtractionError(Exception):
    """The document yields no text (unsupported, corrupt, empty or too large).

    A property of the document, not a failure of the service: retrying cannot change it.
    """

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class _Kind(enum.Enum):
    PDF = "pdf"
    TEXT = "text"
    HTML = "html"
    DOCX = "docx"


_BY_TYPE: Final = {
    PDF: _Kind.PDF,
    TEXT: _Kind.TEXT,
    HTML: _Kind.HTML,
    "application/xhtml+xml": _Kind.HTML,
    DOCX: _Kind.DOCX,
}
_BY_EXTENSION: Final = {
    ".pdf": _Kind.PDF,
    ".txt": _Kind.TEXT,
    ".text": _Kind.TEXT,
    ".md": _Kind.TEXT,
    ".csv": _Kind.TEXT,
    ".log": _Kind.TEXT,
    ".html": _Kind.HTML,
    ".htm": _Kind.HTML,
    ".xhtml": _Kind.HTML,
    ".docx": _Kind.DOCX,
}
# Types that say nothing about the content: browsers and HTTP clients send them for files they
# do not recognise, so the file name decides instead.
_GENERIC_TYPES: Final = frozenset(
    {
        "",
        "application/octet-stream",
        "binary/octet-stream",
        "application/unknown",
        "application/x-download",
        "application/force-download",
    }
)


def _media_type(content_type: str) -> tuple[str, str | None]:
    """('type/subtype' lower-cased, charset parameter or None) of a Content-Type value."""
    main, _, params = content_type.partition(";")
    charset = None
    for param in params.split(";"):
        name, _, value = param.partition("=")
        if name.strip().lower() == "charset" and value.strip():
            charset = value.strip().strip('"').strip("'")
    return main.strip().lower(), charset


def _kind_of(media_type: str, file_name: str) -> _Kind | None:
    kind = _BY_TYPE.get(media_type)
    if kind is not None:
        return kind
    if media_type.startswith("text/"):
        return _Kind.TEXT  # text/csv, text/markdown, ...: readable as they are
    if media_type in _GENERIC_TYPES:
        return _BY_EXTENSION.get(PurePosixPath(file_name.lower()).suffix)
    return None


def extract_text(data: bytes, *, content_type: str, file_name: str) -> str:
    """The document's text, lines separated by '\\n'; raises ExtractionError when there is none."""
    media_type, charset = _media_type(content_type)
    kind = _kind_of(media_type, file_name)
    described = media_type or f"file {file_name!r} without a content type"
    if kind is None:
        raise ExtractionError(f"unsupported content type {described} ({file_name})")
    if len(data) > MAX_INPUT_BYTES:
        raise ExtractionError(
            f"document is {len(data):,} bytes, over the {MAX_INPUT_BYTES // (1024 * 1024)} MB limit"
        )
    if not data:
        raise ExtractionError(f"document {file_name!r} is empty")
    extractor: Callable[[bytes, str | None], str] = _EXTRACTORS[kind]
    text = _tidy(extractor(data, charset))
    if not text:
        raise ExtractionError(f"no text found in {described} document {file_name!r}")
    if len(text) > MAX_TEXT_CHARS:
        raise ExtractionError(f"document text is {len(text):,} characters, over the limit")
    return text


def _tidy(text: str) -> str:
    """Unix newlines, no NULs, no trailing spaces, no leading or trailing blank lines."""
    text = text.replace("\r\n", "\n").replace("\r", "\n").replace("\x00", "")
    return "\n".join(line.rstrip() for line in text.split("\n")).strip("\n")


# -- PDF ------------------------------------------------------------------------------------------
def _pdf(data: bytes, _charset: str | None) -> str:
    # Imported here so that a service handling only text never pays for the PDF parser.
    from pypdf import PdfReader  # noqa: PLC0415
    from pypdf.errors import FileNotDecryptedError  # noqa: PLC0415

    # pypdf caps every decompressed stream (75 MB by default), which bounds a decompression bomb.
    # Any parser exception is a property of this document: retrying would fail the same way.
    try:
        reader = PdfReader(io.BytesIO(data))
        if reader.is_encrypted:
            reader.decrypt("")  # many PDFs are "encrypted" with an empty user password
        count = len(reader.pages)
        if count > MAX_PDF_PAGES:
            raise ExtractionError(f"PDF has {count:,} pages, over the {MAX_PDF_PAGES:,} limit")
        pages = [page.extract_text() or "" for page in reader.pages]
    except ExtractionError:
        raise
    except FileNotDecryptedError as exc:
        raise ExtractionError(f"PDF is encrypted: {exc}") from exc
    except Exception as exc:
        raise ExtractionError(f"cannot read PDF: {type(exc).__name__}: {exc}") from exc
    return "\n".join(pages)


# -- plain text -----------------------------------------------------------------------------------
def _decode(data: bytes, charset: str | None) -> str:
    """The declared charset if it is known and fits, else UTF-8 (BOM allowed), else Latin-1."""
    if charset:
        try:
            return data.decode(codecs.lookup(charset).name)
        except (LookupError, UnicodeDecodeError):
            pass  # a wrong declaration is common; the content decides below
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError:
        # Latin-1 maps every byte, so this never fails; legacy Western text is the usual case.
        return data.decode("latin-1")


# -- HTML -----------------------------------------------------------------------------------------
_SKIPPED: Final = frozenset({"script", "style", "head", "noscript", "template", "title"})
_BLOCKS: Final = frozenset(
    {
        "address", "article", "aside", "blockquote", "br", "dd", "div", "dl", "dt", "fieldset",
        "figcaption", "figure", "footer", "form", "h1", "h2", "h3", "h4", "h5", "h6", "header",
        "hr", "li", "main", "nav", "ol", "p", "pre", "section", "table", "tr", "ul", "body",
    }
)  # fmt: skip
_CELLS: Final = frozenset({"td", "th"})
_META_CHARSET_RE: Final = re.compile(rb"""<meta[^>]+charset\s*=\s*["']?([A-Za-z0-9._-]+)""", re.I)
# Tabs are not collapsed: they separate table cells, as in the DOCX text.
_SPACES_RE: Final = re.compile(r"[ \f\v\u00a0]+")


_LAYOUT_WHITESPACE: Final = str.maketrans("\r\n\t", "   ")


class _TextCollector(HTMLParser):
    """Collects visible text; block elements end lines, script/style/head contents are dropped."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.parts: list[str] = []
        self._skip: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in _SKIPPED:
            self._skip.append(tag)
            return
        if tag == "body" and "head" in self._skip:
            # </head> is optional in HTML: the body starts where the head ends.
            self._skip.clear()
        if self._skip:
            return
        if tag in _BLOCKS:
            self.parts.append("\n")
        elif tag in _CELLS:
            self.parts.append("\t")

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if not self._skip and tag in _BLOCKS:
            self.parts.append("\n")

    def handle_endtag(self, tag: str) -> None:
        if tag in _SKIPPED:
            # Unwind to the matching open tag; a stray end tag changes nothing.
            if tag in self._skip:
                while self._skip and self._skip.pop() != tag:
                    pass
            return
        if not self._skip and tag in _BLOCKS:
            self.parts.append("\n")

    def handle_data(self, data: str) -> None:
        if not self._skip:
            # Source line breaks are layout, not content; only elements make lines.
            self.parts.append(data.translate(_LAYOUT_WHITESPACE))


def _html(data: bytes, charset: str | None) -> str:
    if charset is None:
        declared = _META_CHARSET_RE.search(data[:4096])
        charset = declared.group(1).decode("ascii") if declared else None
    collector = _TextCollector()
    try:
        collector.feed(_decode(data, charset))
        collector.close()
    except Exception as exc:
        raise ExtractionError(f"cannot read HTML: {type(exc).__name__}: {exc}") from exc
    # Entities are already decoded (convert_charrefs); unescaping again would turn a literal
    # "&amp;lt;" into "<".
    lines = (_SPACES_RE.sub(" ", line).strip() for line in "".join(collector.parts).split("\n"))
    return "\n".join(line for line in lines if line)


# -- DOCX -----------------------------------------------------------------------------------------
def _check_zip(data: bytes) -> None:
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            unpacked = sum(info.file_size for info in archive.infolist())
            packed = sum(info.compress_size for info in archive.infolist())
    except (zipfile.BadZipFile, ValueError, OSError) as exc:
        raise ExtractionError(f"cannot read DOCX: not a valid zip archive ({exc})") from exc
    if unpacked > MAX_DOCX_UNPACKED_BYTES or unpacked > MAX_DOCX_RATIO * max(packed, 1):
        raise ExtractionError(
            f"DOCX unpacks to {unpacked:,} bytes from {packed:,}: refused as a decompression bomb"
        )


def _docx(data: bytes, _charset: str | None) -> str:
    from docx import Document  # noqa: PLC0415
    from docx.table import Table  # noqa: PLC0415

    _check_zip(data)
    try:
        document = Document(io.BytesIO(data))
        lines: list[str] = []
        # Body order, so that a table's text stays between the paragraphs around it.
        for block in document.iter_inner_content():
            if isinstance(block, Table):
                for row in block.rows:
                    cells: list[str] = []
                    for cell in row.cells:
                        text = cell.text.strip()
                        # A merged cell is returned once per grid column it spans.
                        if text and (not cells or cells[-1] != text):
                            cells.append(text)
                    if cells:
                        lines.append("\t".join(cells))
            else:
                lines.append(block.text)
    except Exception as exc:
        raise ExtractionError(f"cannot read DOCX: {type(exc).__name__}: {exc}") from exc
    return "\n".join(lines)


_EXTRACTORS: Final[dict[_Kind, Callable[[bytes, str | None], str]]] = {
    _Kind.PDF: _pdf,
    _Kind.TEXT: _decode,
    _Kind.HTML: _html,
    _Kind.DOCX: _docx,
}

__all__ = [
    "DOCX",
    "HTML",
    "MAX_INPUT_BYTES",
    "PDF",
    "TEXT",
    "ExtractionError",
    "extract_text",
]
