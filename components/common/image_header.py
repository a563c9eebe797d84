"""Image format, size and channels read from the file's header, without decoding pixels.

Everything here is a pure function of the file's bytes. The format comes from the
magic bytes, never from the file name.
"""

from __future__ import annotations

import dataclasses
import struct

JPEG = "jpeg"
PNG = "png"
GIF = "gif"
BMP = "bmp"
WEBP = "webp"

# Colour modes, as reported in statistics.
MODE_GRAY = "gray"
MODE_GRAY_ALPHA = "gray_alpha"
MODE_RGB = "rgb"
MODE_RGBA = "rgba"
MODE_PALETTE = "palette"
MODE_CMYK = "cmyk"
MODE_YCCK = "ycck"


class ImageHeaderError(ValueError):
    """The bytes are not a readable image; the message is the reason."""


@dataclasses.dataclass(frozen=True)
class ImageHeader:
    format: str
    width: int
    height: int
    channels: int  # channels of the decoded image (alpha included)
    mode: str
    bit_depth: int = 8
    exif_orientation: int = 1  # 1 = upright; EXIF values 2..8 need a transform

    @property
    def pixels(self) -> int:
        return self.width * self.height


def sniff_format(data: bytes) -> str | None:
    """The image format from magic bytes, or None."""
    if data[:3] == b"\xff\xd8\xff":
        return JPEG
    if data[:8] == b"\x89PNG\r\n\x1a\n":
        return PNG
    if data[:6] in (b"GIF87a", b"GIF89a"):
        return GIF
    if data[:2] == b"BM" and len(data) >= 26:
        return BMP
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return WEBP
    return None


def read_header(data: bytes) -> ImageHeader:
    """Parses the header of a JPEG, PNG, GIF, BMP or WebP file.

    Raises:
      ImageHeaderError: the bytes are empty, not a supported image, or truncated.
    """
    if not data:
        raise ImageHeaderError("empty file (0 bytes)")
    fmt = sniff_format(data)
    if fmt is None:
        raise ImageHeaderError(f"not an image: unrecognised content starting {data[:8]!r}")
    parser = {
        JPEG: _jpeg_header,
        PNG: _png_header,
        GIF: _gif_header,
        BMP: _bmp_header,
        WEBP: _webp_header,
    }[fmt]
    try:
        header = parser(data)
    except (struct.error, IndexError) as e:
        raise ImageHeaderError(f"truncated {fmt} header") from e
    if header.width <= 0 or header.height <= 0:
        raise ImageHeaderError(f"{fmt} header gives an empty size {header.width}x{header.height}")
    return header


def check_complete(data: bytes, fmt: str) -> None:
    """Checks that a JPEG or PNG ends where its format says it must.

    A cut-off download or copy keeps a valid header but loses the end marker, so this
    catches truncation without decoding.

    Raises:
      ImageHeaderError: the end marker is missing.
    """
    if fmt == JPEG:
        # Some encoders pad after EOI; allow a little trailing data.
        if b"\xff\xd9" not in data[-64:]:
            raise ImageHeaderError("truncated jpeg: no end-of-image marker")
    elif fmt == PNG:
        if b"IEND" not in data[-32:]:
            raise ImageHeaderError("truncated png: no IEND chunk")


_SOF_MARKERS = frozenset(range(0xC0, 0xD0)) - {0xC4, 0xC8, 0xCC}


def _jpeg_header(data: bytes) -> ImageHeader:
    pos = 2
    orientation = 1
    adobe_transform: int | None = None
    size = len(data)
    while pos < size:
        if data[pos] != 0xFF:
            raise ImageHeaderError(f"corrupt jpeg: expected a marker at byte {pos}")
        while pos < size and data[pos] == 0xFF:  # fill bytes
            pos += 1
        if pos >= size:
            break
        marker = data[pos]
        pos += 1
        if marker in (0xD8, 0x01) or 0xD0 <= marker <= 0xD7:
            continue
        if marker == 0xD9 or marker == 0xDA:
            break
        (length,) = struct.unpack(">H", data[pos : pos + 2])
        segment = data[pos + 2 : pos + length]
        if marker == 0xE1 and segment[:6] == b"Exif\x00\x00":
            orientation = _exif_orientation(segment[6:])
        elif marker == 0xEE and segment[:5] == b"Adobe" and len(segment) >= 12:
            adobe_transform = segment[11]
        elif marker in _SOF_MARKERS:
            precision, height, width, components = struct.unpack(">BHHB", segment[:6])
            if components == 1:
                mode, channels = MODE_GRAY, 1
            elif components == 3:
                mode, channels = MODE_RGB, 3
            elif components == 4:
                mode = MODE_YCCK if adobe_transform == 2 else MODE_CMYK
                channels = 4
            else:
                raise ImageHeaderError(f"unsupported jpeg with {components} components")
            return ImageHeader(JPEG, width, height, channels, mode, precision, orientation)
        pos += length
    raise ImageHeaderError("truncated jpeg: no frame header (SOF) found")


def _exif_orientation(tiff: bytes) -> int:
    if tiff[:2] == b"II":
        endian = "<"
    elif tiff[:2] == b"MM":
        endian = ">"
    else:
        return 1
    try:
        (ifd_offset,) = struct.unpack(endian + "I", tiff[4:8])
        (count,) = struct.unpack(endian + "H", tiff[ifd_offset : ifd_offset + 2])
        for i in range(count):
            entry = tiff[ifd_offset + 2 + 12 * i : ifd_offset + 14 + 12 * i]
            tag, _, _, value = struct.unpack(endian + "HHIH", entry[:10])
            if tag == 0x0112:
                return value if 1 <= value <= 8 else 1
    except struct.error:
        pass
    return 1


_PNG_MODES = {
    0: (MODE_GRAY, 1),
    2: (MODE_RGB, 3),
    3: (MODE_PALETTE, 3),
    4: (MODE_GRAY_ALPHA, 2),
    6: (MODE_RGBA, 4),
}


def _png_header(data: bytes) -> ImageHeader:
    if len(data) < 33:  # signature + IHDR chunk
        raise ImageHeaderError("truncated png header")
    if data[12:16] != b"IHDR":
        raise ImageHeaderError("corrupt png: first chunk is not IHDR")
    width, height, bit_depth, color_type = struct.unpack(">IIBB", data[16:26])
    if color_type not in _PNG_MODES:
        raise ImageHeaderError(f"corrupt png: unknown colour type {color_type}")
    mode, channels = _PNG_MODES[color_type]
    if color_type == 3 and _png_has_chunk_before_idat(data, b"tRNS"):
        channels = 4
    return ImageHeader(PNG, width, height, channels, mode, bit_depth)


def _png_has_chunk_before_idat(data: bytes, name: bytes) -> bool:
    pos = 8
    while pos + 8 <= len(data):
        (length,) = struct.unpack(">I", data[pos : pos + 4])
        kind = data[pos + 4 : pos + 8]
        if kind == name:
            return True
        if kind == b"IDAT":
            return False
        pos += 12 + length
    return False


def _gif_header(data: bytes) -> ImageHeader:
    width, height = struct.unpack("<HH", data[6:10])
    return ImageHeader(GIF, width, height, 3, MODE_PALETTE)


def _bmp_header(data: bytes) -> ImageHeader:
    width, height = struct.unpack("<ii", data[18:26])
    (bits,) = struct.unpack("<H", data[28:30])
    channels = 4 if bits == 32 else 3
    return ImageHeader(BMP, width, abs(height), channels, MODE_RGBA if channels == 4 else MODE_RGB)


def _webp_header(data: bytes) -> ImageHeader:
    chunk = data[12:16]
    if chunk == b"VP8 ":
        width, height = struct.unpack("<HH", data[26:30])
        return ImageHeader(WEBP, width & 0x3FFF, height & 0x3FFF, 3, MODE_RGB)
    if chunk == b"VP8L":
        b = data[21:25]
        width = 1 + (((b[1] & 0x3F) << 8) | b[0])
        height = 1 + (((b[3] & 0x0F) << 10) | (b[2] << 2) | ((b[1] & 0xC0) >> 6))
        has_alpha = bool(b[3] & 0x10)
        return ImageHeader(
            WEBP, width, height, 4 if has_alpha else 3, MODE_RGBA if has_alpha else MODE_RGB
        )
    if chunk == b"VP8X":
        flags = data[20]
        width = 1 + int.from_bytes(data[24:27], "little")
        height = 1 + int.from_bytes(data[27:30], "little")
        has_alpha = bool(flags & 0x10)
        return ImageHeader(
            WEBP, width, height, 4 if has_alpha else 3, MODE_RGBA if has_alpha else MODE_RGB
        )
    raise ImageHeaderError(f"unsupported webp chunk {chunk!r}")
