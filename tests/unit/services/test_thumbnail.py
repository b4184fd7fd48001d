"""make_thumbnail on the shipped samples and on edge cases: sizes, modes, sniffing, limits."""

from __future__ import annotations

import io
import warnings

import pytest
from PIL import Image

from services.thumbnailer.thumbnail import MAX_INPUT_BYTES, ThumbnailError, make_thumbnail
from tests.unit.services.processor_support import SAMPLES


def png(data: bytes) -> Image.Image:
    image = Image.open(io.BytesIO(data))
    assert image.format == "PNG"
    image.load()
    return image


def encoded(image: Image.Image, fmt: str, **options: object) -> bytes:
    out = io.BytesIO()
    image.save(out, format=fmt, **options)
    return out.getvalue()


def test_photo_becomes_a_png_within_256_keeping_its_aspect_ratio() -> None:
    thumb = png(make_thumbnail((SAMPLES / "photo.png").read_bytes(), content_type="image/png"))
    assert thumb.size == (256, 192)  # 640x480 scaled down
    assert thumb.mode == "RGB"


def test_invoice_pdf_first_page_becomes_a_portrait_png_with_ink_on_it() -> None:
    data = (SAMPLES / "invoice.pdf").read_bytes()
    thumb = png(make_thumbnail(data, content_type="application/pdf"))
    width, height = thumb.size
    assert height == 256
    assert 170 <= width <= 190  # A4 is 595x842 points
    darkest = min(low for low, _high in thumb.convert("RGB").getextrema())
    assert darkest < 128  # the text was rendered, not just a white page


def test_max_size_is_respected() -> None:
    data = (SAMPLES / "invoice.pdf").read_bytes()
    assert max(png(make_thumbnail(data, content_type="application/pdf", max_size=64)).size) == 64
    with pytest.raises(ValueError, match="max_size"):
        make_thumbnail(data, content_type="application/pdf", max_size=0)


def test_corrupt_pdf_is_a_thumbnail_error() -> None:
    data = (SAMPLES / "corrupt.pdf").read_bytes()
    with pytest.raises(ThumbnailError, match="cannot read PDF"):
        make_thumbnail(data, content_type="application/pdf")


@pytest.mark.parametrize(
    ("sample", "content_type"),
    [("receipt.txt", "text/plain"), ("letter.html", "text/html; charset=utf-8")],
)
def test_text_types_are_unsupported(sample: str, content_type: str) -> None:
    data = (SAMPLES / sample).read_bytes()
    with pytest.raises(ThumbnailError, match=f"unsupported content type {content_type[:9]}"):
        make_thumbnail(data, content_type=content_type)


def test_corrupt_image_is_a_thumbnail_error() -> None:
    data = (SAMPLES / "photo.png").read_bytes()[:200]
    with pytest.raises(ThumbnailError, match="cannot read image/png"):
        make_thumbnail(data, content_type="image/png")


def test_text_labelled_as_an_image_is_a_thumbnail_error() -> None:
    with pytest.raises(ThumbnailError, match="cannot read image/jpeg"):
        make_thumbnail(b"not a picture at all", content_type="image/jpeg")


@pytest.mark.parametrize(("sample", "expected_height"), [("invoice.pdf", 256), ("photo.png", 192)])
def test_generic_content_type_is_sniffed(sample: str, expected_height: int) -> None:
    data = (SAMPLES / sample).read_bytes()
    thumb = png(make_thumbnail(data, content_type="application/octet-stream"))
    assert thumb.size[1] == expected_height


def test_large_jpeg_is_scaled_down() -> None:
    photo = Image.new("RGB", (2000, 1500), (200, 30, 30))
    thumb = png(make_thumbnail(encoded(photo, "JPEG"), content_type="image/jpeg"))
    assert thumb.size == (256, 192)


def test_transparent_palette_image_keeps_its_alpha() -> None:
    image = Image.new("P", (100, 50), 0)
    image.putpalette([255, 0, 0, 0, 0, 255] + [0] * 762)
    data = encoded(image, "GIF", transparency=0)
    assert png(make_thumbnail(data, content_type="image/gif")).mode == "RGBA"


def test_greyscale_and_cmyk_images_become_rgb() -> None:
    for image, fmt in (
        (Image.new("L", (10, 10), 128), "PNG"),
        (Image.new("CMYK", (10, 10)), "JPEG"),
    ):
        assert (
            png(make_thumbnail(encoded(image, fmt), content_type=f"image/{fmt.lower()}")).mode
            == "RGB"
        )


def test_image_with_too_many_pixels_is_refused_before_decoding() -> None:
    # Mode "1" keeps the test image small in memory; its header alone decides the refusal.
    huge = encoded(Image.new("1", (7000, 7000)), "PNG")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", Image.DecompressionBombWarning)
        with pytest.raises(ThumbnailError, match="over the 40,000,000 limit"):
            make_thumbnail(huge, content_type="image/png")


def test_decompression_bomb_is_refused_by_pillow() -> None:
    huge = encoded(Image.new("1", (9500, 9500)), "PNG")
    with pytest.raises(ThumbnailError, match="decompression bomb"):
        make_thumbnail(huge, content_type="image/png")


def test_oversize_input_is_refused() -> None:
    with pytest.raises(ThumbnailError, match="over the 20 MB limit"):
        make_thumbnail(b"\0" * (MAX_INPUT_BYTES + 1), content_type="image/png")


def test_empty_input_is_refused() -> None:
    with pytest.raises(ThumbnailError, match="empty"):
        make_thumbnail(b"", content_type="application/pdf")
