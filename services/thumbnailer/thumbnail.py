"""PNG thumbnails of images (Pillow) and of a PDF's first page (PDFium), bounded in size.

Pure functions without I/O; input that cannot be previewed is a ThumbnailError, not a crash.
"""

from __future__ import annotations

import io
import threading
from typing import Final

from PIL import Image, ImageOps

MAX_INPUT_BYTES: Final = 20 * 1024 * 1024
MAX_PIXELS: Final = 40_000_000
"""Largest decoded image accepted (width x height); about 160 MB as RGBA."""
MAX_RENDER_SCALE: Final = 4.0

# Pillow's own guard: it raises DecompressionBombError above twice this value while opening.
# Process-wide, and meant to be: no service in this process should decode a larger image.
Image.MAX_IMAGE_PIXELS = MAX_PIXELS

PDF: Final = "application/pdf"
IMAGE_TYPES: Final = frozenset(
    {"image/png", "image/jpeg", "image/gif", "image/webp", "image/bmp", "image/tiff"}
)
_GENERIC_TYPES: Final = frozenset({"", "application/octet-stream", "binary/octet-stream"})

# PDFium is not thread-safe, and the runner calls handlers from several worker threads.
_PDFIUM_LOCK: Final = threading.Lock()


class ThumbnailError(Exception):
    """The input cannot be previewed (unsupported type, corrupt or too large)."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def make_thumbnail(data: bytes, *, content_type: str, max_size: int = 256) -> bytes:
    """A PNG of at most max_size x max_size pixels, aspect ratio kept."""
    if max_size < 1:
        raise ValueError(f"max_size must be at least 1, got {max_size}")
    media_type = content_type.partition(";")[0].strip().lower()
    if media_type in _GENERIC_TYPES:
        # Nothing declared: the first bytes tell a PDF apart; anything else is tried as an image.
        media_type = PDF if data.startswith(b"%PDF-") else "image/*"
    if media_type != PDF and media_type not in IMAGE_TYPES and media_type != "image/*":
        raise ThumbnailError(f"unsupported content type {media_type or '(none)'} for a thumbnail")
    if len(data) > MAX_INPUT_BYTES:
        raise ThumbnailError(
            f"input is {len(data):,} bytes, over the {MAX_INPUT_BYTES // (1024 * 1024)} MB limit"
        )
    if not data:
        raise ThumbnailError("input is empty")
    image = (
        _render_pdf(data, max_size)
        if media_type == PDF
        else _open_image(data, media_type, max_size)
    )
    image.thumbnail((max_size, max_size), Image.Resampling.LANCZOS)
    out = io.BytesIO()
    image.save(out, format="PNG")
    return out.getvalue()


def _open_image(data: bytes, media_type: str, max_size: int) -> Image.Image:
    try:
        image: Image.Image = Image.open(io.BytesIO(data))
        # open() reads only the header, so the size is known before any pixel is decoded.
        if image.width * image.height > MAX_PIXELS:
            raise ThumbnailError(
                f"image is {image.width}x{image.height} pixels, over the {MAX_PIXELS:,} limit"
            )
        # draft() lets JPEG decode at a reduced scale still at least max_size; a no-op for
        # other formats. thumbnail() would do it too, but exif_transpose() loads the pixels first.
        image.draft(None, (max_size, max_size))
        image = ImageOps.exif_transpose(image)
        image.load()
    except ThumbnailError:
        raise
    except (Image.DecompressionBombError, OSError, ValueError, SyntaxError) as exc:
        # OSError covers "cannot identify image file" and truncated data; SyntaxError is what
        # some Pillow decoders raise for malformed headers.
        raise ThumbnailError(f"cannot read {media_type} image: {exc}") from exc
    return _displayable(image)


def _displayable(image: Image.Image) -> Image.Image:
    """RGB, or RGBA where the image has transparency: modes a PNG viewer shows as intended."""
    if image.mode in {"RGB", "RGBA"}:
        return image
    has_alpha = image.mode in {"LA", "PA", "La"} or (
        image.mode == "P" and "transparency" in image.info
    )
    return image.convert("RGBA" if has_alpha else "RGB")


def _render_pdf(data: bytes, max_size: int) -> Image.Image:
    # Imported here so that a thumbnailer that only sees images never loads PDFium.
    import pypdfium2 as pdfium  # noqa: PLC0415

    with _PDFIUM_LOCK:
        try:
            document = pdfium.PdfDocument(data)
        except pdfium.PdfiumError as exc:
            raise ThumbnailError(f"cannot read PDF: {exc}") from exc
        try:
            if len(document) == 0:
                raise ThumbnailError("PDF has no pages")
            page = document[0]
            try:
                width, height = page.get_size()
                if width <= 0 or height <= 0:
                    raise ThumbnailError(f"PDF page has no area ({width}x{height} points)")
                # Twice the target resolution, so that the downscale in thumbnail() smooths
                # the text; capped so that a tiny page cannot make a huge bitmap.
                scale = min(MAX_RENDER_SCALE, 2 * max_size / max(width, height))
                bitmap = page.render(scale=scale)
                try:
                    image = bitmap.to_pil().copy()  # detached from PDFium's buffer
                finally:
                    bitmap.close()
            finally:
                page.close()
        except pdfium.PdfiumError as exc:
            raise ThumbnailError(f"cannot render PDF: {exc}") from exc
        finally:
            document.close()
    return _displayable(image)


__all__ = ["IMAGE_TYPES", "MAX_INPUT_BYTES", "MAX_PIXELS", "ThumbnailError", "make_thumbnail"]
