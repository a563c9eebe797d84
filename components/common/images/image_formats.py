"""The image formats the project reads: one row each, and everything else derives from
this table. The listing takes its file extensions from it (a file of another extension
is ignored, and counted so), read_header recognises a format by its magic bytes (never
by the file name), and the conversion asks a row whether the format is stored as it
came and whether it can hold more than one frame.

A new format is one row here, its parsers in header_parsers.py, and its decode in
image_example_gen/image_codec.py; tests/test_image_formats.py checks each row's
extensions, magic and parser on an image of that format.
"""

from __future__ import annotations

import dataclasses
import struct
from collections.abc import Callable, Iterator

from imgpipe.components.common.images import header_parsers as parse
from imgpipe.components.common.images.image_header import (
    BMP,
    GIF,
    JPEG,
    PNG,
    WEBP,
    Frame,
    ImageHeader,
    ImageHeaderError,
)


@dataclasses.dataclass(frozen=True)
class ImageFormat:
    """One image format, as the project reads it."""

    name: str  # ImageHeader.format
    extensions: tuple[str, ...]  # lower case, with the dot
    is_format: Callable[[bytes], bool]  # from the magic bytes
    read_header: Callable[[bytes], ImageHeader]
    # Every frame the decoders allocate, in file order (see frames()).
    frames: Callable[[bytes, ImageHeader], Iterator[Frame]] | None
    # Stored in the Examples as it came, when no pixel option applies: the model's input
    # pipeline decodes it on its fast path. Other formats are re-encoded
    # (ImageOptions.other_formats_to).
    stored_as_is: bool
    # How the conversion decodes it, when it needs the pixels (image_codec.decode).
    decoder: str


FORMATS: tuple[ImageFormat, ...] = (
    ImageFormat(
        JPEG,
        (".jpg", ".jpeg", ".jpe", ".jfif"),
        lambda data: data[:3] == b"\xff\xd8\xff",
        parse.jpeg_header,
        None,
        stored_as_is=True,
        decoder="simplejpeg (libjpeg-turbo, DCT-domain downscaling); CMYK and YCCK through "
        "OpenCV; EXIF orientation applied",
    ),
    ImageFormat(
        PNG,
        (".png",),
        lambda data: data[:8] == b"\x89PNG\r\n\x1a\n",
        parse.png_header,
        parse.png_frames,
        stored_as_is=True,
        decoder="OpenCV; 16-bit rounded to 8; an APNG's first frame",
    ),
    ImageFormat(
        GIF,
        (".gif",),
        lambda data: data[:6] in (b"GIF87a", b"GIF89a"),
        parse.gif_header,
        parse.gif_frames,
        stored_as_is=False,
        decoder="OpenCV, Pillow for what OpenCV refuses; the first frame",
    ),
    ImageFormat(
        BMP,
        (".bmp",),
        lambda data: data[:2] == b"BM" and len(data) >= 26,
        parse.bmp_header,
        None,
        stored_as_is=False,
        decoder="OpenCV",
    ),
    ImageFormat(
        WEBP,
        (".webp",),
        lambda data: data[:4] == b"RIFF" and data[8:12] == b"WEBP",
        parse.webp_header,
        parse.webp_frames,
        stored_as_is=False,
        decoder="OpenCV; an animation's first frame",
    ),
)
BY_NAME = {image_format.name: image_format for image_format in FORMATS}
# The file extensions the listing takes as images.
EXTENSIONS = frozenset(ext for image_format in FORMATS for ext in image_format.extensions)


def sniff(data: bytes) -> ImageFormat | None:
    """The format of `data` from its magic bytes, or None."""
    return next((f for f in FORMATS if f.is_format(data)), None)


def sniff_format(data: bytes) -> str | None:
    """The name of the format of `data` from its magic bytes, or None."""
    found = sniff(data)
    return found.name if found is not None else None


def read_header(data: bytes) -> ImageHeader:
    """Parses the header of an image of any format in FORMATS.

    Raises:
      ImageHeaderError: the bytes are empty, not a supported image, or truncated.
    """
    if not data:
        raise ImageHeaderError("empty file (0 bytes)")
    found = sniff(data)
    if found is None:
        raise ImageHeaderError(f"not an image: unrecognised content starting {data[:8]!r}")
    try:
        header = found.read_header(data)
    except (struct.error, IndexError) as e:
        raise ImageHeaderError(f"truncated {found.name} header") from e
    if header.width <= 0 or header.height <= 0:
        raise ImageHeaderError(
            f"{found.name} header gives an empty size {header.width}x{header.height}"
        )
    return header


def frames(data: bytes, header: ImageHeader) -> Iterator[Frame]:
    """Every frame of the image, in file order: each GIF frame, each APNG or animated
    WebP frame, the bitstream of a VP8X WebP; for the other images, the image itself.
    Decoders allocate by these sizes, which the header's canvas does not bound.

    Raises:
      ImageHeaderError: the frame structure is truncated or corrupt.
    """
    read_frames = BY_NAME[header.format].frames
    if read_frames is None:
        yield Frame(0, 0, header.width, header.height)
        return
    try:
        yield from read_frames(data, header)
    except (struct.error, IndexError) as e:
        raise ImageHeaderError(f"truncated {header.format}: a frame header is cut off") from e


def is_multi_frame(image_format: str) -> bool:
    """Whether a file of the format can hold frames other than its canvas."""
    return BY_NAME[image_format].frames is not None


def stored_as_is(image_format: str) -> bool:
    return BY_NAME[image_format].stored_as_is
