"""What a file's header says of an image (ImageHeader, its frames) and the checks that
bound the work of decoding it, without decoding pixels.

Everything here is a pure function of the file's bytes. The headers are read by
image_formats.read_header, through the table of formats there (the parsers are in
header_parsers.py); the format comes from the magic bytes, never from the file name.
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
    check_bounded(data, header)
    fmt = header.format
    if fmt == JPEG:
        # Some encoders pad after EOI; allow a little trailing data.
        if b"\xff\xd9" not in data[-64:]:
            raise ImageHeaderError("truncated jpeg: no end-of-image marker")
    elif fmt == PNG:
        if b"IEND" not in data[-32:]:
            raise ImageHeaderError("truncated png: no IEND chunk")


def check_bounded(data: bytes, header: ImageHeader) -> None:
    """Checks that decoding the file costs bounded work: it is long enough for the size
    its header claims (min_bytes_note), and a JPEG is of a coding TensorFlow decodes with
    at most MAX_JPEG_SCANS scans. Every stage that decodes bytes it did not check itself
    asks this (a truncated end is left to the decoder, which names it).

    Raises:
      ImageHeaderError: the reason.
    """
    if len(data) < header.min_bytes:
        raise ImageHeaderError(
            f"truncated or corrupt {header.format}: {len(data)} bytes cannot hold the "
            f"{header.width}x{header.height} image its header claims "
            f"(at least {header.min_bytes} bytes)"
        )
    if header.format == JPEG:
        check_jpeg_decodable(data, header)


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


# JPEG codings, by frame header (SOFn). TensorFlow's decoder (libjpeg-turbo's 8-bit API)
# reads the sequential and progressive DCT codings, Huffman or arithmetic; it refuses
# lossless and hierarchical (differential) JPEG.
JPEG_SEQUENTIAL = "sequential"
JPEG_PROGRESSIVE = "progressive"
JPEG_LOSSLESS = "lossless"
JPEG_HIERARCHICAL = "hierarchical"
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
