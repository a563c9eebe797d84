"""The header and frame parsers of each image format in image_formats.FORMATS: pure
functions of the file's bytes, raising ImageHeaderError (or struct.error / IndexError on
bytes cut short, which image_formats turns into one) on what they cannot read."""

from __future__ import annotations

import struct
from collections.abc import Iterator

from imgpipe.components.common.images.image_header import (
    ARITHMETIC_BLOCKS_PER_BYTE,
    BMP,
    DEFLATE_MAX_RATIO,
    GIF,
    HUFFMAN_BLOCKS_PER_BYTE,
    JPEG,
    JPEG_HIERARCHICAL,
    JPEG_LOSSLESS,
    JPEG_PROGRESSIVE,
    JPEG_SEQUENTIAL,
    LZW_MAX_PIXELS_PER_BYTE,
    MAX_JPEG_MARKERS,
    MODE_CMYK,
    MODE_GRAY,
    MODE_GRAY_ALPHA,
    MODE_PALETTE,
    MODE_RGB,
    MODE_RGBA,
    MODE_YCCK,
    PNG,
    WEBP,
    Frame,
    ImageHeader,
    ImageHeaderError,
)

_SOF_MARKERS = frozenset(range(0xC0, 0xD0)) - {0xC4, 0xC8, 0xCC}
_HUFFMAN_DCT_SOF = frozenset({0xC0, 0xC1, 0xC2})
_HUFFMAN_LOSSLESS_SOF = 0xC3
_JPEG_CODINGS = {
    0xC0: JPEG_SEQUENTIAL,
    0xC1: JPEG_SEQUENTIAL,
    0xC2: JPEG_PROGRESSIVE,
    0xC3: JPEG_LOSSLESS,
    0xC5: JPEG_HIERARCHICAL,
    0xC6: JPEG_HIERARCHICAL,
    0xC7: JPEG_HIERARCHICAL,
    0xC9: JPEG_SEQUENTIAL,
    0xCA: JPEG_PROGRESSIVE,
    0xCB: JPEG_LOSSLESS,
    0xCD: JPEG_HIERARCHICAL,
    0xCE: JPEG_HIERARCHICAL,
    0xCF: JPEG_HIERARCHICAL,
}
_ARITHMETIC_SOF = frozenset({0xC9, 0xCA, 0xCB, 0xCD, 0xCE, 0xCF})


def jpeg_header(data: bytes) -> ImageHeader:
    pos = 2
    orientation = 1
    adobe_transform: int | None = None
    size = len(data)
    markers = 0
    while pos < size:
        markers += 1
        if markers > MAX_JPEG_MARKERS:
            raise ImageHeaderError(
                f"corrupt jpeg: more than {MAX_JPEG_MARKERS} marker segments before the frame "
                "header (SOF)"
            )
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
            orientation = exif_orientation(segment[6:])
        elif marker == 0xEE and segment[:5] == b"Adobe" and len(segment) >= 12:
            adobe_transform = segment[11]
        elif marker in _SOF_MARKERS:
            precision, height, width, components = struct.unpack(">BHHB", segment[:6])
            blocks = -(-width // 8) * -(-height // 8)
            if marker in _HUFFMAN_DCT_SOF:
                min_bytes = blocks // HUFFMAN_BLOCKS_PER_BYTE
            elif marker == _HUFFMAN_LOSSLESS_SOF:
                min_bytes = width * height // 8
            elif marker in _ARITHMETIC_SOF:
                min_bytes = blocks // ARITHMETIC_BLOCKS_PER_BYTE
            else:
                min_bytes = 0
            if components == 1:
                mode, channels = MODE_GRAY, 1
            elif components == 3:
                mode, channels = MODE_RGB, 3
            elif components == 4:
                mode = MODE_YCCK if adobe_transform == 2 else MODE_CMYK
                channels = 4
            else:
                raise ImageHeaderError(f"unsupported jpeg with {components} components")
            return ImageHeader(
                JPEG,
                width,
                height,
                channels,
                mode,
                precision,
                orientation,
                min_bytes,
                jpeg_coding=_JPEG_CODINGS[marker],
            )
        pos += length
    raise ImageHeaderError("truncated jpeg: no frame header (SOF) found")


def exif_orientation(tiff: bytes) -> int:
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


_PNG_SAMPLES = {0: 1, 2: 3, 3: 1, 4: 2, 6: 4}


def png_header(data: bytes) -> ImageHeader:
    if len(data) < 33:  # signature + IHDR chunk
        raise ImageHeaderError("truncated png header")
    if data[12:16] != b"IHDR":
        raise ImageHeaderError("corrupt png: first chunk is not IHDR")
    width, height, bit_depth, color_type = struct.unpack(">IIBB", data[16:26])
    if color_type not in _PNG_MODES:
        raise ImageHeaderError(f"corrupt png: unknown colour type {color_type}")
    mode, channels = _PNG_MODES[color_type]
    before_idat = _png_chunks_before_idat(data)
    if color_type == 3 and b"tRNS" in before_idat:
        channels = 4
    raw_row = 1 + -(-width * _PNG_SAMPLES[color_type] * bit_depth // 8)
    return ImageHeader(
        PNG,
        width,
        height,
        channels,
        mode,
        bit_depth,
        min_bytes=height * raw_row // DEFLATE_MAX_RATIO,
        animated=b"acTL" in before_idat,
    )


def _png_chunks_before_idat(data: bytes) -> set[bytes]:
    kinds = set()
    pos = 8
    while pos + 8 <= len(data):
        (length,) = struct.unpack(">I", data[pos : pos + 4])
        kind = data[pos + 4 : pos + 8]
        if kind == b"IDAT":
            break
        kinds.add(kind)
        pos += 12 + length
    return kinds


def gif_header(data: bytes) -> ImageHeader:
    width, height = struct.unpack("<HH", data[6:10])
    return ImageHeader(
        GIF, width, height, 3, MODE_PALETTE, min_bytes=width * height // LZW_MAX_PIXELS_PER_BYTE
    )


_BMP_UNCOMPRESSED = frozenset({0, 3, 6})  # BI_RGB, BI_BITFIELDS, BI_ALPHABITFIELDS


def bmp_header(data: bytes) -> ImageHeader:
    width, height = struct.unpack("<ii", data[18:26])
    (bits,) = struct.unpack("<H", data[28:30])
    channels = 4 if bits == 32 else 3
    (info_size,) = struct.unpack("<I", data[14:18])
    min_bytes = 0
    if info_size >= 40 and width > 0:
        (pixel_offset,) = struct.unpack("<I", data[10:14])
        (compression,) = struct.unpack("<I", data[30:34])
        if compression in _BMP_UNCOMPRESSED:
            min_bytes = pixel_offset + (width * bits + 31) // 32 * 4 * abs(height)
    return ImageHeader(
        BMP,
        width,
        abs(height),
        channels,
        MODE_RGBA if channels == 4 else MODE_RGB,
        min_bytes=min_bytes,
    )


def webp_header(data: bytes) -> ImageHeader:
    (riff_size,) = struct.unpack("<I", data[4:8])
    chunk = data[12:16]
    if chunk in (b"VP8 ", b"VP8L"):
        width, height, has_alpha = _webp_bitstream_size(chunk, data[20:30])
        animated = False
    elif chunk == b"VP8X":
        flags = data[20]
        width = 1 + int.from_bytes(data[24:27], "little")
        height = 1 + int.from_bytes(data[27:30], "little")
        has_alpha = bool(flags & 0x10)
        animated = bool(flags & 0x02)
    else:
        raise ImageHeaderError(f"unsupported webp chunk {chunk!r}")
    return ImageHeader(
        WEBP,
        width,
        height,
        4 if has_alpha else 3,
        MODE_RGBA if has_alpha else MODE_RGB,
        min_bytes=riff_size + 8,
        animated=animated,
    )


def _webp_bitstream_size(chunk: bytes, payload: bytes) -> tuple[int, int, bool]:
    """Width, height and alpha of a VP8 (lossy) or VP8L (lossless) bitstream."""
    if chunk == b"VP8 ":
        width, height = struct.unpack("<HH", payload[6:10])
        return width & 0x3FFF, height & 0x3FFF, False
    b = payload[1:5]
    width = 1 + (((b[1] & 0x3F) << 8) | b[0])
    height = 1 + (((b[3] & 0x0F) << 10) | (b[2] << 2) | ((b[1] & 0xC0) >> 6))
    return width, height, bool(b[3] & 0x10)


def gif_frames(data: bytes, header: ImageHeader) -> Iterator[Frame]:
    del header  # each frame's rectangle is in its own descriptor
    flags = data[10]
    pos = 13 + (3 * (2 << (flags & 7)) if flags & 0x80 else 0)  # after the colour table
    found = False
    while pos < len(data) and data[pos] != 0x3B:  # the trailer
        block = data[pos]
        if block == 0x21:  # extension: label, then data sub-blocks
            pos = _skip_gif_sub_blocks(data, pos + 2)
        elif block == 0x2C:  # image descriptor, local colour table, LZW code size, data
            left, top, width, height, frame_flags = struct.unpack(
                "<HHHHB", data[pos + 1 : pos + 10]
            )
            yield Frame(left, top, width, height)
            found = True
            pos += 10
            if frame_flags & 0x80:
                pos += 3 * (2 << (frame_flags & 7))
            pos = _skip_gif_sub_blocks(data, pos + 1)
        else:
            raise ImageHeaderError(f"corrupt gif: unknown block 0x{block:02x} at byte {pos}")
    if not found:
        raise ImageHeaderError("corrupt gif: no image in it")


def _skip_gif_sub_blocks(data: bytes, pos: int) -> int:
    while True:
        if pos >= len(data):
            raise ImageHeaderError("truncated gif: ends inside a block")
        size = data[pos]
        pos += 1 + size
        if size == 0:
            return pos


def png_frames(data: bytes, header: ImageHeader) -> Iterator[Frame]:
    """An APNG's frames (fcTL); a still PNG's one frame."""
    if not header.animated:
        yield Frame(0, 0, header.width, header.height)
        return
    pos = 8
    while pos + 8 <= len(data):
        length, kind = struct.unpack(">I4s", data[pos : pos + 8])
        if kind == b"fcTL":
            width, height, left, top = struct.unpack(">IIII", data[pos + 12 : pos + 28])
            yield Frame(left, top, width, height)
        elif kind == b"IEND":
            return
        pos += 12 + length


def webp_frames(data: bytes, header: ImageHeader) -> Iterator[Frame]:
    """An extended (VP8X) WebP's frames or bitstream; a simple WebP's one frame."""
    if data[12:16] != b"VP8X":
        yield Frame(0, 0, header.width, header.height)
        return
    pos = 12
    while pos + 8 <= len(data):
        kind = data[pos : pos + 4]
        (size,) = struct.unpack("<I", data[pos + 4 : pos + 8])
        payload = data[pos + 8 : pos + 8 + size]
        if kind == b"ANMF":
            left = 2 * int.from_bytes(payload[0:3], "little")
            top = 2 * int.from_bytes(payload[3:6], "little")
            width = 1 + int.from_bytes(payload[6:9], "little")
            height = 1 + int.from_bytes(payload[9:12], "little")
            yield Frame(left, top, width, height)
        elif kind in (b"VP8 ", b"VP8L"):
            width, height, _ = _webp_bitstream_size(kind, payload[:10])
            yield Frame(0, 0, width, height)
        pos += 8 + size + (size & 1)
