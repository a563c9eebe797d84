"""Small generated images for tests: every format and colour model the converter handles."""

from __future__ import annotations

import io
import os
import struct

import cv2
import numpy as np
from PIL import Image


def photo_like(height: int, width: int, seed: int = 0) -> np.ndarray:
    """A smooth RGB image with some texture, so JPEG sizes resemble photos'."""
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:height, 0:width].astype(np.float32)
    base = rng.uniform(0, 255, 3)
    freq = rng.uniform(0.02, 0.08, 3)
    channels = [
        base[c] * 0.5 + 60 * np.sin(x * freq[c] + y * freq[(c + 1) % 3]) + 40 for c in range(3)
    ]
    image = np.stack(channels, axis=-1) + rng.normal(0, 6, (height, width, 3))
    return np.clip(image, 0, 255).astype(np.uint8)


def jpeg_bytes(rgb: np.ndarray, quality: int = 90) -> bytes:
    ok, buf = cv2.imencode(
        ".jpg", cv2.cvtColor(rgb, cv2.COLOR_RGB2BGR), [cv2.IMWRITE_JPEG_QUALITY, quality]
    )
    assert ok
    return buf.tobytes()


def png_bytes(pixels: np.ndarray) -> bytes:
    if pixels.ndim == 3 and pixels.shape[2] == 3:
        pixels = cv2.cvtColor(pixels, cv2.COLOR_RGB2BGR)
    elif pixels.ndim == 3 and pixels.shape[2] == 4:
        pixels = cv2.cvtColor(pixels, cv2.COLOR_RGBA2BGRA)
    ok, buf = cv2.imencode(".png", pixels)
    assert ok
    return buf.tobytes()


def pillow_bytes(image: Image.Image, fmt: str, **kwargs) -> bytes:
    out = io.BytesIO()
    image.save(out, format=fmt, **kwargs)
    return out.getvalue()


def cmyk_jpeg_bytes(rgb: np.ndarray) -> bytes:
    return pillow_bytes(Image.fromarray(rgb).convert("CMYK"), "JPEG", quality=95)


def exif_jpeg_bytes(rgb: np.ndarray, orientation: int) -> bytes:
    exif = Image.Exif()
    exif[0x0112] = orientation
    return pillow_bytes(Image.fromarray(rgb), "JPEG", quality=95, exif=exif.tobytes())


def write(path: str, data: bytes) -> str:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(data)
    return path


def make_image_folder(
    root: str, labels: dict[str, int], size: tuple[int, int] = (48, 64), seed: int = 0
) -> list[str]:
    """root/<label>/<i>.jpg for each label; returns the relative paths written."""
    written = []
    for li, (label, count) in enumerate(sorted(labels.items())):
        for i in range(count):
            rgb = photo_like(size[0], size[1], seed=seed * 1000 + li * 100 + i)
            rel = f"{label}/img_{i:03d}.jpg"
            write(os.path.join(root, rel), jpeg_bytes(rgb))
            written.append(rel)
    return written


# Three saturated colour classes: any model separates them, and their grayscale copies
# keep the overall per-channel means while every class's colour goes.
COLOUR_CLASSES = {"red": (220, 30, 30), "green": (30, 200, 40), "blue": (30, 40, 210)}


def colour_class_image(label: str, index: int, size: tuple[int, int] = (32, 32)) -> np.ndarray:
    """Image `index` of a COLOUR_CLASSES class: its colour, a smooth random pattern and
    noise, seeded by (label, index)."""
    seed = sorted(COLOUR_CLASSES).index(label) * 100_000 + index
    rng = np.random.default_rng(seed)
    height, width = size
    small = rng.integers(-60, 60, (4, 4, 1)).astype(np.float32)
    pattern = cv2.resize(small, (width, height), interpolation=cv2.INTER_CUBIC)[..., None]
    noise = rng.normal(0, 8, (height, width, 3))
    colour = np.array(COLOUR_CLASSES[label], np.float32)
    return np.clip(colour + pattern + noise, 0, 255).astype(np.uint8)


def make_colour_folder(
    root: str, per_class: int, size: tuple[int, int] = (32, 32), grayscale: bool = False
) -> list[str]:
    """root/<colour>/<i>.jpg for each COLOUR_CLASSES class; returns the relative paths.

    Image i of a class is the same picture whatever per_class, so a larger per_class
    adds images to a smaller one's. grayscale writes the same pictures as grey JPEGs.
    """
    written = []
    for label in sorted(COLOUR_CLASSES):
        for i in range(per_class):
            rgb = colour_class_image(label, i, size)
            rel = f"{label}/img_{i:03d}.jpg"
            if grayscale:
                ok, buf = cv2.imencode(".jpg", cv2.cvtColor(rgb, cv2.COLOR_RGB2GRAY))
                assert ok
                data = buf.tobytes()
            else:
                data = jpeg_bytes(rgb)
            write(os.path.join(root, rel), data)
            written.append(rel)
    return written


# Hostile images: valid magic bytes, with headers that lie or frames that explode.


def lying_jpeg(width: int, height: int) -> bytes:
    """A small real JPEG whose frame header (SOF0) claims width x height."""
    data = bytearray(jpeg_bytes(photo_like(16, 16)))
    sof = data.index(b"\xff\xc0")
    data[sof + 5 : sof + 9] = struct.pack(">HH", height, width)
    return bytes(data)


def gif_bytes(screen: tuple[int, int], frames: list[tuple[int, int, int, int]]) -> bytes:
    """A GIF with a logical screen of (width, height) and frames (left, top, width,
    height), each holding the LZW data of one pixel: decodable when the frames are 1x1."""
    out = b"GIF89a" + struct.pack("<HHBBB", *screen, 0x80, 0, 0) + b"\x00\x00\x00\xff\xff\xff"
    for frame in frames:
        out += b"\x2c" + struct.pack("<HHHHB", *frame, 0) + b"\x02\x02\x44\x01\x00"
    return out + b";"


def animated_bytes(fmt: str, size: int = 8, later: tuple[int, int] | None = None) -> bytes:
    """A 2-frame APNG ("PNG") or animated WebP ("WEBP"); `later` rewrites the second
    frame's (width, height) in its frame header (fcTL / ANMF) only."""
    frames = [Image.fromarray(photo_like(size, size, seed=i)) for i in range(2)]
    data = bytearray(pillow_bytes(frames[0], fmt, save_all=True, append_images=frames[1:]))
    if later is not None:
        chunk = b"fcTL" if fmt == "PNG" else b"ANMF"
        second = data.index(chunk, data.index(chunk) + 4)
        if fmt == "PNG":  # sequence number, then width and height
            data[second + 8 : second + 16] = struct.pack(">II", *later)
        else:  # after the chunk size: x, y, then width - 1 and height - 1, 3 bytes each
            size_bytes = [(value - 1).to_bytes(3, "little") for value in later]
            data[second + 14 : second + 20] = b"".join(size_bytes)
    return bytes(data)


def marked(height: int, width: int) -> np.ndarray:
    """A dark RGB image with a bright red square at its top-left corner: its rotation
    shows in which corner the square lands."""
    pixels = np.full((height, width, 3), 30, np.uint8)
    pixels[: height // 4, : width // 4] = (250, 20, 20)
    return pixels


def stored_for(upright: np.ndarray, orientation: int) -> np.ndarray:
    """The pixels a camera stores, with EXIF `orientation`, for an image seen as
    `upright`: the inverse of the orientation's transform."""
    inverse = {
        1: lambda p: p,
        2: lambda p: p[:, ::-1],
        3: lambda p: p[::-1, ::-1],
        4: lambda p: p[::-1],
        5: lambda p: p.swapaxes(0, 1),
        6: lambda p: np.rot90(p, 1),
        7: lambda p: np.rot90(p, 1)[:, ::-1],
        8: lambda p: np.rot90(p, -1),
    }[orientation]
    return np.ascontiguousarray(inverse(upright))


def half_transparent_png(height: int, width: int) -> bytes:
    """RGBA: the top half opaque red, the bottom half fully transparent with black
    behind the transparency (what most editors store)."""
    rgba = np.zeros((height, width, 4), np.uint8)
    rgba[: height // 2] = (255, 0, 0, 255)
    return png_bytes(rgba)
