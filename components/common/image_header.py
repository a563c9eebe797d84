"""Image format, size and channels read from the file's header, without decoding pixels.

Everything here is a pure function of the file's bytes. The format comes from the
magic bytes, never from the file name.
"""

from __future__ import annotations

import dataclasses
import struct
from collections.abc import Iterator

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
    # The fewest bytes a complete file of this size and coding can have: a shorter file
    # is truncated, or its header lies about the size (see min_bytes_note).
    min_bytes: int = 0
    animated: bool = False  # an APNG or animated WebP: more frames than the first
    # A JPEG's coding, from its frame header: one of the JPEG_* codings below.
    jpeg_coding: str = ""

    @property
    def pixels(self) -> int:
        return self.width * self.height


@dataclasses.dataclass(frozen=True)
class Frame:
    """One frame's rectangle on the canvas (GIF frames, APNG fcTL, WebP ANMF)."""

    left: int
    top: int
    width: int
    height: int


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


def check_complete(data: bytes, header: ImageHeader) -> None:
    """Checks that the file is long enough for the size its header claims, and that a
    JPEG or PNG ends where its format says it must.

    A cut-off download or copy keeps a valid header but loses the end marker, so this
    catches truncation without decoding. A header that claims far more pixels than the
    bytes can code (a 6 KB JPEG "of" 100 megapixels) would cost the full size in memory
    at every decode; see min_bytes_note for the bounds.

    Raises:
      ImageHeaderError: the file is too short, or the end marker is missing.
    """
    fmt = header.format
    if len(data) < header.min_bytes:
        raise ImageHeaderError(
            f"truncated or corrupt {fmt}: {len(data)} bytes cannot hold the "
            f"{header.width}x{header.height} image its header claims "
            f"(at least {header.min_bytes} bytes)"
        )
    if fmt == JPEG:
        # Some encoders pad after EOI; allow a little trailing data.
        if b"\xff\xd9" not in data[-64:]:
            raise ImageHeaderError("truncated jpeg: no end-of-image marker")
        check_jpeg_decodable(data, header)
    elif fmt == PNG:
        if b"IEND" not in data[-32:]:
            raise ImageHeaderError("truncated png: no IEND chunk")


def check_jpeg_decodable(data: bytes, header: ImageHeader) -> None:
    """Refuses a JPEG that TensorFlow cannot decode, or that would cost unbounded time
    at every decode: lossless, hierarchical or 12-bit coding, and more than
    MAX_JPEG_SCANS progressive scans. Pure and cheap: sequential files are not scanned.

    Raises:
      ImageHeaderError: the reason, and what to do.
    """
    if header.jpeg_coding in (JPEG_LOSSLESS, JPEG_HIERARCHICAL):
        raise ImageHeaderError(
            f"{header.jpeg_coding} jpeg: TensorFlow cannot decode it; convert it to PNG"
        )
    if header.bit_depth != 8:
        raise ImageHeaderError(
            f"{header.bit_depth}-bit jpeg: TensorFlow decodes 8-bit JPEG only; convert it to "
            "PNG or an 8-bit JPEG"
        )
    if header.jpeg_coding == JPEG_PROGRESSIVE:
        scans = count_jpeg_scans(data, stop_after=MAX_JPEG_SCANS)
        if scans > MAX_JPEG_SCANS:
            raise ImageHeaderError(
                f"progressive jpeg with more than {MAX_JPEG_SCANS} scans: each scan is a pass "
                "over the whole image at every decode (encoders write at most 10); "
                "re-encode it"
            )


def count_jpeg_scans(data: bytes, stop_after: int) -> int:
    """The JPEG's start-of-scan markers, counted up to stop_after + 1.

    Inside entropy-coded data a 0xFF byte is followed by 0x00 (stuffing), a restart
    marker or another 0xFF; any other marker ends the scan. So every FF DA is a scan
    (an embedded EXIF thumbnail's are skipped with their APP segment).
    """
    scans = 0
    pos = 2
    size = len(data)
    in_scan = False
    while pos < size:
        if in_scan:
            pos = data.find(b"\xff", pos)
            if pos < 0 or pos + 1 >= size:
                break
        elif data[pos] != 0xFF:
            break  # not at a marker: the header parser reports corrupt files
        marker = data[pos + 1] if pos + 1 < size else 0
        if marker in (0x00, 0xFF) or 0xD0 <= marker <= 0xD7 or marker == 0x01:
            pos += 1 if marker == 0xFF else 2
            continue
        if marker == 0xD9:
            break
        if pos + 4 > size:
            break
        (length,) = struct.unpack(">H", data[pos + 2 : pos + 4])
        if marker == 0xDA:
            scans += 1
            if scans > stop_after:
                break
            in_scan = True
        pos += 2 + length
    return scans


_SOF_MARKERS = frozenset(range(0xC0, 0xD0)) - {0xC4, 0xC8, 0xCC}
_HUFFMAN_DCT_SOF = frozenset({0xC0, 0xC1, 0xC2})
_HUFFMAN_LOSSLESS_SOF = 0xC3
# JPEG codings, by frame header (SOFn). TensorFlow's decoder (libjpeg-turbo's 8-bit API)
# reads the sequential and progressive DCT codings, Huffman or arithmetic; it refuses
# lossless and hierarchical (differential) JPEG.
JPEG_SEQUENTIAL = "sequential"
JPEG_PROGRESSIVE = "progressive"
JPEG_LOSSLESS = "lossless"
JPEG_HIERARCHICAL = "hierarchical"
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
# Arithmetic coding has no floor of its own (an adaptive coder codes a run of certain
# decisions in almost no bits): 208 bytes "of" 9000x9000 decoded to 243 MB. Its floor is
# a policy, 1 byte per 64 blocks, an eighth of the Huffman floor's 1 bit per block;
# real arithmetic-coded photos are within 10% of their Huffman size.
ARITHMETIC_BLOCKS_PER_BYTE = 64
# Each progressive scan is a pass over the whole image: 2,090 scans cost 18 s of CPU per
# decode. Encoders write 10 at most (libjpeg's and mozjpeg's scripts); libjpeg-turbo's
# own scan limit (TJPARAM_SCANLIMIT, djpeg -maxscans) exists for the same reason.
MAX_JPEG_SCANS = 100
# The largest image, in pixels, the conversion takes (ImageOptions.max_pixels) and the
# served model decodes (serving_limits), unless set otherwise.
DEFAULT_MAX_PIXELS = 100_000_000
# min_bytes_note: the lower bounds behind ImageHeader.min_bytes, each a property of the
# coding, so no valid file falls below them:
#   Huffman-coded JPEG: each 8x8 block of the full-resolution component takes at least
#     one bit (its DC code; progressive AC scans can skip blocks, the DC scan cannot);
#     lossless JPEG at least a bit a sample. Arithmetic coding has no such floor.
#   PNG: deflate expands at most 1032:1, and the raw rows hold a filter byte each.
#   GIF: an LZW code of b bits stands for fewer than 2**b pixels, so a byte of codes
#     stands for fewer than 4096 (2730, in fact).
#   uncompressed BMP: every row, padded to 4 bytes, is stored; RLE has no floor.
#   WebP: the RIFF header gives the file's length.
DEFLATE_MAX_RATIO = 1032
LZW_MAX_PIXELS_PER_BYTE = 4096


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
            blocks = -(-width // 8) * -(-height // 8)
            if marker in _HUFFMAN_DCT_SOF:
                min_bytes = blocks // 8
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


_PNG_SAMPLES = {0: 1, 2: 3, 3: 1, 4: 2, 6: 4}


def _png_header(data: bytes) -> ImageHeader:
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


def _gif_header(data: bytes) -> ImageHeader:
    width, height = struct.unpack("<HH", data[6:10])
    return ImageHeader(
        GIF, width, height, 3, MODE_PALETTE, min_bytes=width * height // LZW_MAX_PIXELS_PER_BYTE
    )


_BMP_UNCOMPRESSED = frozenset({0, 3, 6})  # BI_RGB, BI_BITFIELDS, BI_ALPHABITFIELDS


def _bmp_header(data: bytes) -> ImageHeader:
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


def _webp_header(data: bytes) -> ImageHeader:
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


def frames(data: bytes, header: ImageHeader) -> Iterator[Frame]:
    """Every frame of the image, in file order: each GIF frame, each APNG or animated
    WebP frame, the bitstream of a VP8X WebP; for the other images, the image itself.
    Decoders allocate by these sizes, which the header's canvas does not bound.

    Raises:
      ImageHeaderError: the frame structure is truncated or corrupt.
    """
    try:
        if header.format == GIF:
            yield from _gif_frames(data)
        elif header.format == PNG and header.animated:
            yield from _apng_frames(data)
        elif header.format == WEBP and data[12:16] == b"VP8X":
            yield from _webp_frames(data)
        else:
            yield Frame(0, 0, header.width, header.height)
    except (struct.error, IndexError) as e:
        raise ImageHeaderError(f"truncated {header.format}: a frame header is cut off") from e


def _gif_frames(data: bytes) -> Iterator[Frame]:
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


def _apng_frames(data: bytes) -> Iterator[Frame]:
    pos = 8
    while pos + 8 <= len(data):
        length, kind = struct.unpack(">I4s", data[pos : pos + 8])
        if kind == b"fcTL":
            width, height, left, top = struct.unpack(">IIII", data[pos + 12 : pos + 28])
            yield Frame(left, top, width, height)
        elif kind == b"IEND":
            return
        pos += 12 + length


def _webp_frames(data: bytes) -> Iterator[Frame]:
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
