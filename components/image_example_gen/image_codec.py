"""Turns the bytes of one image file into the bytes that are stored.

By default JPEG and PNG bytes are kept as they are: only the header is read. Pixels
are decoded only when they must change: a requested resize or re-encode, a format or
colour model TensorFlow cannot decode (GIF, BMP, WebP, CMYK/YCCK JPEG, 16-bit PNG), a
JPEG with an EXIF orientation of 2..8 (stored upright, as the user sees it: decoders
ignore EXIF), an image with an alpha channel (composited onto `background`, white by
default: the model sees no transparency), or `verify=decode`. All functions are pure:
bytes and options in, bytes out.
"""

from __future__ import annotations

import dataclasses

import cv2
import numpy as np
import simplejpeg

from imgpipe.components.common.images import image_formats
from imgpipe.components.common.images import image_header as hdr
from imgpipe.components.image_example_gen.options import (
    OUTPUT_JPEG,
    OUTPUT_KEEP,
    OUTPUT_PNG,
    VERIFY_DECODE,
    ImageOptions,
)

# OpenCV must not rotate by EXIF itself: orientation is applied once, below, for every
# decoder alike.
_CV2_UNCHANGED = cv2.IMREAD_UNCHANGED | cv2.IMREAD_IGNORE_ORIENTATION
_CV2_REDUCED_COLOR = {
    1: cv2.IMREAD_COLOR,
    2: cv2.IMREAD_REDUCED_COLOR_2,
    4: cv2.IMREAD_REDUCED_COLOR_4,
    8: cv2.IMREAD_REDUCED_COLOR_8,
}


_ALPHA_MODES = (hdr.MODE_RGBA, hdr.MODE_GRAY_ALPHA)


class ImageDecodeError(ValueError):
    """The image could not be decoded; the message is the reason."""


@dataclasses.dataclass(frozen=True)
class EncodedImage:
    data: bytes
    format: str  # "jpeg" or "png"
    height: int
    width: int
    channels: int
    reencoded: bool
    rotated: bool = False  # an EXIF orientation of 2..8 was applied
    composited: bool = False  # an alpha channel was composited onto the background


def convert_image(data: bytes, options: ImageOptions) -> tuple[EncodedImage, hdr.ImageHeader]:
    """Reads, checks and (when needed) transforms one image.

    Raises:
      ImageHeaderError, ImageDecodeError: the image is bad; the message says why.
    """
    header = image_formats.read_header(data)
    check_pixels(data, header, options.max_pixels)
    hdr.check_complete(data, header)
    if not needs_pixels(header, options):
        if options.verify == VERIFY_DECODE:
            # The statistics' policy: libjpeg's strict decode, and what is kept as it is
            # must decode in TensorFlow, which trains and serves on these bytes.
            decode(data, header, min_side=None, accurate=False)
            check_tensorflow_decodes(data, header)
        return EncodedImage(
            data, header.format, header.height, header.width, header.channels, reencoded=False
        ), header
    pixels = decode(data, header, min_side=options.resize)
    # Counted only where some pixel is see-through: decoders give GIFs an opaque alpha.
    composited = has_alpha(pixels) and bool((pixels[..., -1] != 255).any())
    pixels = _fit_channels(pixels, options)
    if options.resize is not None:
        upright = (
            (header.width, header.height)
            if header.exif_orientation >= 5
            else (header.height, header.width)
        )
        pixels = resize_shorter_side(pixels, options.resize, options.center_crop, upright)
    fmt = target_format(header, options, has_alpha=pixels.ndim == 3 and pixels.shape[2] == 4)
    encoded = encode(pixels, fmt, options.jpeg_quality)
    height, width = pixels.shape[:2]
    channels = 1 if pixels.ndim == 2 else pixels.shape[2]
    rotated = header.exif_orientation != 1
    return EncodedImage(encoded, fmt, height, width, channels, True, rotated, composited), header


def check_tensorflow_decodes(data: bytes, header: hdr.ImageHeader) -> None:
    """Raises ImageDecodeError, with TensorFlow's own words, when TensorFlow's decoder
    refuses the JPEG or PNG bytes that training and serving would read."""
    import tensorflow as tf

    from imgpipe.components.common.runtime import tf_errors

    try:
        tf.io.decode_image(data, channels=0, expand_animations=False)
    except (tf.errors.InvalidArgumentError, tf.errors.UnknownError) as e:
        raise ImageDecodeError(
            f"undecodable {header.format} for TensorFlow: {tf_errors.op_error_reason(e.message)}"
        ) from e


def check_pixels(data: bytes, header: hdr.ImageHeader, max_pixels: int) -> None:
    """Refuses an image whose canvas or any frame exceeds max_pixels, from the headers,
    before anything is decoded or allocated.

    A GIF's canvas grows to hold frames that overflow its logical screen, as decoders
    grow it; an APNG or WebP frame must lie inside the canvas.

    Raises:
      ImageHeaderError: a decompression bomb, or a frame outside the canvas.
    """
    _check_area(header.width, header.height, max_pixels, "")
    if not image_formats.is_multi_frame(header.format):
        return  # one frame, the header's: checked
    canvas_width, canvas_height = header.width, header.height
    for index, frame in enumerate(image_formats.frames(data, header)):
        where = f"frame {index}: "
        _check_area(frame.width, frame.height, max_pixels, where)
        right, bottom = frame.left + frame.width, frame.top + frame.height
        if header.format == hdr.GIF:
            canvas_width, canvas_height = max(canvas_width, right), max(canvas_height, bottom)
        elif right > header.width or bottom > header.height:
            raise hdr.ImageHeaderError(
                f"corrupt {header.format}: {where}{frame.width}x{frame.height} at "
                f"({frame.left}, {frame.top}) lies outside the "
                f"{header.width}x{header.height} canvas"
            )
    _check_area(canvas_width, canvas_height, max_pixels, "canvas: ")
    if header.format == hdr.GIF and canvas_width * canvas_height > (
        len(data) * hdr.LZW_MAX_PIXELS_PER_BYTE
    ):
        raise hdr.ImageHeaderError(
            f"truncated or corrupt gif: {len(data)} bytes cannot hold the "
            f"{canvas_width}x{canvas_height} canvas its frames claim"
        )


def _check_area(width: int, height: int, max_pixels: int, where: str) -> None:
    if width * height > max_pixels:
        raise hdr.ImageHeaderError(
            f"decompression bomb: {where}{width}x{height} = {width * height} pixels "
            f"exceeds max_pixels={max_pixels}"
        )


def needs_pixels(header: hdr.ImageHeader, options: ImageOptions) -> bool:
    if options.transforms_pixels:
        return True
    if not image_formats.stored_as_is(header.format):
        return True
    if header.format == hdr.JPEG and header.mode in (hdr.MODE_CMYK, hdr.MODE_YCCK):
        return True
    if header.exif_orientation != 1 or header.mode in _ALPHA_MODES:
        return True
    return header.format == hdr.PNG and header.bit_depth == 16


def target_format(header: hdr.ImageHeader, options: ImageOptions, has_alpha: bool) -> str:
    if options.output_format != OUTPUT_KEEP:
        return options.output_format
    if image_formats.stored_as_is(header.format):
        return header.format
    if options.other_formats_to == OUTPUT_JPEG and not has_alpha:
        return OUTPUT_JPEG
    return OUTPUT_PNG if has_alpha else options.other_formats_to


def decode(
    data: bytes, header: hdr.ImageHeader, min_side: int | None, accurate: bool = True
) -> np.ndarray:
    """Decodes to RGB, RGBA or gray (2-D) uint8 pixels, upright by EXIF orientation.

    When `min_side` is set and the image is at least twice that on both sides, JPEGs
    are decoded at a reduced scale in the DCT domain (libjpeg-turbo scaling factors),
    keeping both sides >= min_side.

    Args:
      accurate: JPEGs with libjpeg's accurate integer IDCT, as OpenCV and PIL decode, for
        pixels that are kept; False (the fast integer IDCT, TensorFlow's decode_jpeg
        default) only where the pixels are checked and dropped: about 2 dB closer to
        the ideal image before re-encoding, for about 5% of the decode (measured,
        benchmarks/README.md).
    """
    try:
        if header.format == hdr.JPEG and header.mode in (hdr.MODE_RGB, hdr.MODE_GRAY):
            colorspace = "GRAY" if header.mode == hdr.MODE_GRAY else "RGB"
            factor = reduction_factor(header, min_side)
            pixels = simplejpeg.decode_jpeg(
                data,
                colorspace=colorspace,
                fastdct=not accurate,
                min_height=-(-header.height // factor),
                min_width=-(-header.width // factor),
            )
            if pixels.ndim == 3 and pixels.shape[2] == 1:
                pixels = pixels[:, :, 0]
        else:
            pixels = _decode_cv2(data, header, min_side)
    except (ValueError, cv2.error) as e:
        raise ImageDecodeError(f"undecodable {header.format}: {e}") from e
    if pixels is None or pixels.size == 0:
        raise ImageDecodeError(f"undecodable {header.format}")
    if pixels.dtype == np.uint16:
        pixels = ((pixels.astype(np.uint32) * 255 + 32767) // 65535).astype(np.uint8)
    return apply_orientation(pixels, header.exif_orientation)


def reduction_factor(header: hdr.ImageHeader, min_side: int | None) -> int:
    """The largest of 1, 2, 4, 8 that keeps both sides >= min_side when decoding a JPEG.

    Only power-of-two reductions are used: libjpeg-turbo's other scaling factors
    (3/4, 7/8, ...) have no SIMD path and decode slower than full size (measured).
    """
    factor = 1
    if min_side is not None:
        while factor < 8 and min(header.width, header.height) >= 2 * factor * min_side:
            factor *= 2
    return factor


def _decode_cv2(data: bytes, header: hdr.ImageHeader, min_side: int | None) -> np.ndarray | None:
    """The pixels in RGB(A) order, or None when OpenCV cannot decode them."""
    buffer = np.frombuffer(data, np.uint8)
    if header.format == hdr.JPEG:  # CMYK / YCCK: OpenCV converts to BGR
        # OpenCV decodes corrupt data without a word; libjpeg's warnings are errors here.
        simplejpeg.decode_jpeg(data, colorspace="CMYK", min_factor=8)
        flags = (
            _CV2_REDUCED_COLOR[reduction_factor(header, min_side)] | cv2.IMREAD_IGNORE_ORIENTATION
        )
        return _bgr_to_rgb(cv2.imdecode(buffer, flags))
    pixels = cv2.imdecode(buffer, _CV2_UNCHANGED)
    if pixels is None and header.format == hdr.GIF:
        pixels = _decode_pillow(data)
        return pixels
    return _bgr_to_rgb(pixels)


def _decode_pillow(data: bytes) -> np.ndarray | None:
    import io

    from PIL import Image

    try:
        with Image.open(io.BytesIO(data)) as image:
            image.seek(0)
            return np.asarray(image.convert("RGBA" if "transparency" in image.info else "RGB"))
    except (OSError, Image.DecompressionBombError) as e:  # decode() says which file kind
        raise ValueError(str(e)) from e


def _bgr_to_rgb(pixels: np.ndarray | None) -> np.ndarray | None:
    if pixels is None or pixels.ndim == 2:
        return pixels
    if pixels.shape[2] == 3:
        return cv2.cvtColor(pixels, cv2.COLOR_BGR2RGB)
    if pixels.shape[2] == 4:
        return cv2.cvtColor(pixels, cv2.COLOR_BGRA2RGBA)
    return pixels


def apply_orientation(pixels: np.ndarray, orientation: int) -> np.ndarray:
    """Applies an EXIF orientation (1..8) so that the image is upright."""
    if orientation == 2:
        pixels = pixels[:, ::-1]
    elif orientation == 3:
        pixels = pixels[::-1, ::-1]
    elif orientation == 4:
        pixels = pixels[::-1]
    elif orientation == 5:
        pixels = pixels.swapaxes(0, 1)
    elif orientation == 6:
        pixels = np.rot90(pixels, k=-1)
    elif orientation == 7:
        pixels = np.rot90(pixels[:, ::-1], k=-1)
    elif orientation == 8:
        pixels = np.rot90(pixels, k=1)
    return np.ascontiguousarray(pixels)


def has_alpha(pixels: np.ndarray) -> bool:
    return pixels.ndim == 3 and pixels.shape[2] in (2, 4)


def _fit_channels(pixels: np.ndarray, options: ImageOptions) -> np.ndarray:
    """Transparency composited onto the background, always (the model sees what a
    viewer shows on white, and serving does the same: upright.py); gray made RGB for
    channels=3."""
    if has_alpha(pixels):
        pixels = composite_alpha(pixels, options.background)
    if options.channels == 3 and pixels.ndim == 2:
        pixels = cv2.cvtColor(pixels, cv2.COLOR_GRAY2RGB)
    return pixels


def composite_alpha(pixels: np.ndarray, background: tuple[int, int, int]) -> np.ndarray:
    """Composites RGBA (or gray+alpha) onto an RGB background colour."""
    if pixels.shape[2] == 2:
        color = cv2.cvtColor(np.ascontiguousarray(pixels[:, :, 0]), cv2.COLOR_GRAY2RGB)
        alpha = pixels[:, :, 1]
    else:
        color, alpha = pixels[:, :, :3], pixels[:, :, 3]
    alpha = alpha.astype(np.uint32)[:, :, None]
    bg = np.asarray(background, np.uint32)[None, None, :]
    out = (color.astype(np.uint32) * alpha + bg * (255 - alpha) + 127) // 255
    return out.astype(np.uint8)


def resize_shorter_side(
    pixels: np.ndarray, side: int, center_crop: bool, source_shape: tuple[int, int] | None = None
) -> np.ndarray:
    """Scales so the shorter side is `side`; with `center_crop`, keeps the centre square.

    The crop is taken before scaling, so only the kept pixels are resampled.

    Args:
      source_shape: (height, width) of the full-size image when `pixels` was decoded at a
        reduced scale, so the output size is the same as from a full-size decode.
    """
    height, width = source_shape or pixels.shape[:2]
    if center_crop:
        height, width = pixels.shape[:2]
        short = min(height, width)
        top, left = (height - short) // 2, (width - short) // 2
        pixels = pixels[top : top + short, left : left + short]
        new_height = new_width = side
    elif height <= width:
        new_height, new_width = side, max(1, round(width * side / height))
    else:
        new_height, new_width = max(1, round(height * side / width)), side
    if (new_height, new_width) == pixels.shape[:2]:
        return np.ascontiguousarray(pixels)
    ratio = pixels.shape[0] / new_height
    # Area averaging only pays beyond 2x (JPEGs arrive here already DCT-reduced to
    # under 2x); below that, bilinear is near-identical and 4-5x faster (measured).
    if ratio >= 2:
        interpolation = cv2.INTER_AREA
    elif ratio > 1:
        interpolation = cv2.INTER_LINEAR
    else:
        interpolation = cv2.INTER_CUBIC
    return cv2.resize(
        np.ascontiguousarray(pixels), (new_width, new_height), interpolation=interpolation
    )


def encode(pixels: np.ndarray, fmt: str, quality: int) -> bytes:
    """RGB, RGBA or gray pixels as a JPEG (at `quality`, 4:2:0) or a PNG, by OpenCV.

    JPEGs by OpenCV rather than simplejpeg: the same libjpeg-turbo tables and 4:2:0
    subsampling, yet 0.2 dB closer to their input at q90 for 5 us more (measured).
    """
    if fmt == OUTPUT_JPEG:
        extension = ".jpg"
        params = [
            cv2.IMWRITE_JPEG_QUALITY,
            quality,
            cv2.IMWRITE_JPEG_SAMPLING_FACTOR,
            cv2.IMWRITE_JPEG_SAMPLING_FACTOR_420,
        ]
    elif fmt == OUTPUT_PNG:
        extension, params = ".png", []
    else:
        raise ValueError(f"unknown output format {fmt!r}")
    if pixels.ndim == 3:
        code = cv2.COLOR_RGB2BGR if pixels.shape[2] == 3 else cv2.COLOR_RGBA2BGRA
        pixels = cv2.cvtColor(pixels, code)
    ok, buffer = cv2.imencode(extension, pixels, params)
    if not ok:
        raise ImageDecodeError(f"{fmt} encoding failed")
    return buffer.tobytes()
