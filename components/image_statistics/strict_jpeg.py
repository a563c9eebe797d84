"""The strict decode of strict_jpeg.c: the eval pixels of a JPEG from the one decode that
also checks it.

TensorFlow decodes a JPEG with corrupt data behind valid markers into garbage without a
word. The library makes the same libjpeg calls as TensorFlow's crop-decode in
`eval_images`, and resizes the crop as `eval_images` does, so its pixels are TensorFlow's,
bit for bit, but libjpeg's warnings are errors. The statistics then need no second,
checking decode (see decoding.py).

The library is built by `make env` (strict_jpeg_build) into the artifact cache, or into
the package folder by the Dockerfile. Without it, `library()` is None and the statistics
fall back to TensorFlow's decode plus a separate check: the same results, slower.
"""

from __future__ import annotations

import ctypes
import functools
import logging
import os

import numpy as np

from imgpipe.components.image_statistics import strict_jpeg_build

BUILD_COMMAND = "bin/in-env python -m imgpipe.components.image_statistics.strict_jpeg_build"
_DECODED, _CORRUPT, _NOT_HERE = 0, 1, 2
_REASON_SIZE = 200
# TensorFlow refuses to decode an image of 2**29 bytes or more; so does this.
MAX_OUTPUT_BYTES = 1 << 29


class StrictJpegError(ValueError):
    """libjpeg found the data corrupt; the message is its reason."""


def library_paths() -> list[str]:
    """Where the library is looked for, in order."""
    paths = [
        os.path.join(os.path.dirname(os.path.abspath(__file__)), strict_jpeg_build.LIBRARY_NAME)
    ]
    artifacts = os.environ.get(strict_jpeg_build.ARTIFACTS_ENV)
    if artifacts:
        paths.append(strict_jpeg_build.cached_library_path(artifacts))
    return paths


@functools.cache
def library() -> ctypes.CDLL | None:
    """The loaded library, or None (logged once, with the command that builds it)."""
    for path in library_paths():
        if os.path.exists(path):
            lib = ctypes.CDLL(path)
            lib.imgpipe_strict_decode.restype = ctypes.c_int
            lib.imgpipe_strict_decode.argtypes = [
                ctypes.c_char_p,
                ctypes.c_ulong,
                *[ctypes.c_int] * 6,
                ctypes.c_void_p,
                ctypes.c_char_p,
                ctypes.c_int,
            ]
            return lib
    logging.warning(
        "imgpipe: the strict JPEG decoder is not built (looked in %s); the statistics "
        "check JPEGs with a second decode instead, which is slower. Build it with: %s",
        ", ".join(library_paths()),
        BUILD_COMMAND,
    )
    return None


def decode(
    lib: ctypes.CDLL, encoded: bytes, window: tuple[int, int, int, int], out: np.ndarray
) -> bool:
    """Decodes the window (offset_y, offset_x, height, width) of a JPEG and resizes it into
    `out`, a C-contiguous uint8 [out_height, out_width, 3], as `eval_images` does: as
    `tf.image.decode_and_crop_jpeg` decodes the window, then as `eval_resize` resizes it
    (the window itself when `out` is its size). False (and `out` unset) for an image this
    decoder leaves to TensorFlow: CMYK or YCCK, a window outside the frame, one too large,
    or no memory to decode it.

    Raises:
      StrictJpegError: libjpeg found the data corrupt or truncated.
    """
    offset_y, offset_x, height, width = (int(value) for value in window)
    if height * width * 3 >= MAX_OUTPUT_BYTES:
        return False
    if len(out.shape) != 3 or out.shape[2] != 3 or out.dtype != np.uint8:
        raise ValueError(f"out must be uint8 [height, width, 3], got {out.dtype} {out.shape}")
    if not (out.flags.c_contiguous and out.flags.writeable):
        raise ValueError("out must be C-contiguous and writeable")
    reason = ctypes.create_string_buffer(_REASON_SIZE)
    status = lib.imgpipe_strict_decode(
        encoded,
        len(encoded),
        offset_y,
        offset_x,
        height,
        width,
        out.shape[0],
        out.shape[1],
        out.ctypes.data,
        reason,
        _REASON_SIZE,
    )
    if status == _CORRUPT:
        raise StrictJpegError(reason.value.decode(errors="replace"))
    return status == _DECODED
