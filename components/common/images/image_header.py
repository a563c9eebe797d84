"""What a file's header says of an image (ImageHeader, its frames) and the checks that
bound the work of decoding it, without decoding pixels.

Everything here is a pure function of the file's bytes. The headers are read by
image_formats.read_header, through the table of formats there (the parsers are in
header_parsers.py); the format comes from the magic bytes, never from the file name.
"""

from __future__ import annotations

import dataclasses
import re

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
    fmt = header.format
    # The end first: a cut-off file is named truncated, not short of its coded bytes.
    if fmt == JPEG:
        # Some encoders pad after EOI; allow a little trailing data.
        if b"\xff\xd9" not in data[-64:]:
            raise ImageHeaderError("truncated jpeg: no end-of-image marker")
    elif fmt == PNG:
        if b"IEND" not in data[-32:]:
            raise ImageHeaderError("truncated png: no IEND chunk")
    check_bounded(data, header)


def check_bounded(data: bytes, header: ImageHeader) -> None:
    """Checks that decoding the file costs bounded work: it is long enough for the size
    its header claims (min_bytes_note), and a JPEG is of a coding TensorFlow decodes, with
    at most MAX_JPEG_SCANS scans and MAX_JPEG_MARKERS markers, and enough entropy-coded
    bytes for its size. Every stage that decodes bytes it did not check itself asks this
    (a truncated end is left to the decoder, which names it).

    Raises:
      ImageHeaderError: the reason.
    """
    if header.format == JPEG:
        check_jpeg_decodable(data, header)
    elif len(data) < header.min_bytes:
        raise ImageHeaderError(
            f"truncated or corrupt {header.format}: {len(data)} bytes cannot hold the "
            f"{header.width}x{header.height} image its header claims "
            f"(at least {header.min_bytes} bytes)"
        )


def check_jpeg_decodable(data: bytes, header: ImageHeader) -> None:
    """Refuses a JPEG that TensorFlow cannot decode, or whose decode would cost more than
    its bytes can honestly ask: lossless, hierarchical or 12-bit coding; more than
    MAX_JPEG_SCANS scans of any coding (each scan is a pass over its components, and a
    sequential file's scan can be repeated as a progressive one's can); fewer bytes of
    entropy-coded data than its size needs (comments and APPn segments pad a file, not
    its image). One marker walk (jpeg_scans), in C between markers.

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
    walk = jpeg_scans(data, stop_after=MAX_JPEG_SCANS)
    if walk.markers > MAX_JPEG_MARKERS:
        raise ImageHeaderError(
            f"corrupt jpeg: more than {MAX_JPEG_MARKERS} marker segments (real files have "
            "a few dozen); re-encode it"
        )
    if walk.scans > MAX_JPEG_SCANS:
        raise ImageHeaderError(
            f"{header.jpeg_coding} jpeg with more than {MAX_JPEG_SCANS} scans: each scan is a "
            "pass over the image at every decode (encoders write at most 10); re-encode it"
        )
    if walk.coded_bytes < header.min_bytes:
        raise ImageHeaderError(
            f"truncated or corrupt jpeg: {walk.coded_bytes} bytes of coded image data cannot "
            f"hold the {header.width}x{header.height} image its header claims (at least "
            f"{header.min_bytes} bytes; comments and metadata do not count)"
        )


@dataclasses.dataclass(frozen=True)
class JpegScans:
    """What a JPEG's marker walk found (jpeg_scans).

    Attributes:
      scans: start-of-scan (SOS) markers, of any coding, counted up to stop_after + 1.
      coded_bytes: the bytes of entropy-coded data after them (restart markers and
        stuffing included): what the decoder reads as image, not what a segment carries.
      markers: the markers walked, up to MAX_JPEG_MARKERS + 1.
    """

    scans: int
    coded_bytes: int
    markers: int


# A marker, where libjpeg looks for one: 0xFF then anything but 0x00 (a stuffed 0xFF in
# entropy-coded data), 0xFF (fill), TEM or a restart marker, which stay in a scan.
JPEG_MARKER = re.compile(rb"\xff[^\x00\x01\xd0-\xd7\xff]")


def jpeg_scans(data: bytes, stop_after: int) -> JpegScans:
    """Walks a JPEG's markers from its start to its end-of-image marker, as libjpeg reads
    them: a segment is skipped by its length, a scan's entropy-coded data runs to the
    next marker, and bytes between segments that are no marker are passed over (libjpeg
    skips them with a warning). So every scan is counted, whatever its coding, and an
    EXIF thumbnail's scans are not (they lie inside their APP1 segment). Stops after
    stop_after + 1 scans or MAX_JPEG_MARKERS + 1 markers; serving_limits walks the same
    way in TensorFlow ops.
    """
    size = len(data)
    scans = coded = markers = 0
    pos = 0
    while True:
        found = JPEG_MARKER.search(data, pos)
        if found is None:
            break
        pos = found.start()
        markers += 1
        marker = data[pos + 1]
        if marker == 0xD9 or markers > MAX_JPEG_MARKERS:
            break
        if marker == 0xD8:  # SOI: no length
            pos += 2
            continue
        end = min(pos + 2 + int.from_bytes(data[pos + 2 : pos + 4], "big"), size)
        if marker == 0xDA:
            scans += 1
            after = JPEG_MARKER.search(data, end)
            pos = after.start() if after is not None else size
            coded += pos - end
            if scans > stop_after:
                break
        else:
            pos = end
    return JpegScans(scans, coded, markers)


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
# A Huffman-coded DCT block takes at least a bit (min_bytes_note).
HUFFMAN_BLOCKS_PER_BYTE = 8
# Each scan is a pass over the image, progressive or sequential, Huffman or arithmetic:
# 2,090 progressive scans cost 18 s of CPU per decode, a 4000x4000 sequential scan
# repeated 2,003 times (arithmetic, 42 KB) 11.3 s. Encoders write 10 at most (libjpeg's
# and mozjpeg's scripts; a sequential file has one scan a component at most);
# libjpeg-turbo's own scan limit (TJPARAM_SCANLIMIT, djpeg -maxscans) exists for the
# same reason.
MAX_JPEG_SCANS = 100
# Real JPEGs have a few dozen markers (SOI, APPn, DQT, SOF, DHT, SOS, EOI; an ICC
# profile takes at most 255 APP2 segments); the bound keeps the walk itself short: a
# file of 4-byte comments would otherwise be millions of steps.
MAX_JPEG_MARKERS = 1000
# The largest image, in pixels, the conversion takes (ImageOptions.max_pixels) and the
# served model decodes (serving_limits), unless set otherwise.
DEFAULT_MAX_PIXELS = 100_000_000
# min_bytes_note: the lower bounds behind ImageHeader.min_bytes, each a property of the
# coding, so no valid file falls below them:
#   Huffman-coded JPEG: each 8x8 block of the full-resolution component takes at least
#     one bit (its DC code; progressive AC scans can skip blocks, the DC scan cannot);
#     lossless JPEG at least a bit a sample. Arithmetic coding has no such floor. The
#     bits are entropy-coded data, so a JPEG's floor is checked against those bytes
#     alone (JpegScans.coded_bytes): a comment can pad a file, not its image.
#   PNG: deflate expands at most 1032:1, and the raw rows hold a filter byte each.
#   GIF: an LZW code of b bits stands for fewer than 2**b pixels, so a byte of codes
#     stands for fewer than 4096 (2730, in fact).
#   uncompressed BMP: every row, padded to 4 bytes, is stored; RLE has no floor.
#   WebP: the RIFF header gives the file's length.
DEFLATE_MAX_RATIO = 1032
LZW_MAX_PIXELS_PER_BYTE = 4096
