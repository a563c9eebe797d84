"""The table of image formats (components/common/images/image_formats.py): every row is
recognised by its magic bytes whatever the file is called, its header read, its
extensions listed, and its pixels decoded and stored as the row says."""

from __future__ import annotations

import numpy as np
import pytest
from PIL import Image

from imgpipe.components.common.images import image_formats, image_header
from imgpipe.components.image_example_gen import image_codec, listing
from imgpipe.components.image_example_gen.options import ImageOptions
from tests import imagegen

PIXELS = imagegen.photo_like(12, 20)


def _sample(name: str) -> bytes:
    if name == image_header.JPEG:
        return imagegen.jpeg_bytes(PIXELS)
    if name == image_header.PNG:
        return imagegen.png_bytes(PIXELS)
    return imagegen.pillow_bytes(Image.fromarray(PIXELS), name.upper())


@pytest.mark.unit
def test_the_table_names_each_format_once_and_each_extension_once():
    names = [f.name for f in image_formats.FORMATS]
    assert len(names) == len(set(names)) == len(image_formats.BY_NAME)
    extensions = [ext for f in image_formats.FORMATS for ext in f.extensions]
    assert len(extensions) == len(set(extensions)) == len(image_formats.EXTENSIONS)
    assert all(ext.startswith(".") and ext == ext.lower() for ext in extensions)


@pytest.mark.unit
@pytest.mark.parametrize("row", image_formats.FORMATS, ids=lambda f: f.name)
def test_each_row_reads_lists_and_converts_its_format(row):
    data = _sample(row.name)
    assert image_formats.sniff(data) is row
    assert [f.name for f in image_formats.FORMATS if f.is_format(data)] == [row.name]
    header = image_formats.read_header(data)
    assert (header.format, header.width, header.height) == (row.name, 20, 12)
    assert list(image_formats.frames(data, header)) == [image_header.Frame(0, 0, 20, 12)]
    for ext in row.extensions:
        assert listing.has_image_extension(f"cats/a{ext}")
        assert listing.has_image_extension(f"cats/a{ext.upper()}")
    pixels = image_codec.decode(data, header, min_side=None)
    assert pixels.shape == (12, 20, 3)
    if row.name in (image_header.PNG, image_header.BMP):  # lossless
        np.testing.assert_array_equal(pixels, PIXELS)
    stored, _ = image_codec.convert_image(data, ImageOptions())
    assert (stored.format == row.name) == row.stored_as_is
    assert (stored.data == data) == row.stored_as_is


@pytest.mark.unit
def test_what_no_row_claims_is_not_an_image():
    assert not listing.has_image_extension("cats/a.tiff")
    assert not listing.has_image_extension("cats/jpg")
    assert image_formats.sniff(b"II*\x00" + bytes(20)) is None  # a TIFF
    with pytest.raises(image_header.ImageHeaderError, match="not an image"):
        image_formats.read_header(b"II*\x00" + bytes(20))
    with pytest.raises(image_header.ImageHeaderError, match="empty file"):
        image_formats.read_header(b"")
