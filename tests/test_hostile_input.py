"""One conversion, then one statistics run, over a folder of every hostile input at once:
special files, links in and out of the root and in loops, names that are not UTF-8 or
that drive a terminal, bombs in every frame of every format, lying headers, corrupt
data. The run finishes, reads nothing outside the root, and accounts for every entry;
the statistics name the corrupt images that the conversion kept."""

from __future__ import annotations

import errno
import hashlib
import json
import os
import socket
import stat
import threading

import numpy as np
import pytest
import tensorflow as tf
from PIL import Image

from imgpipe.components.common.formats import artifacts, conversion_summary
from imgpipe.components.common.formats import features as fk
from imgpipe.components.common.images import image_formats
from imgpipe.components.common.images import image_header as hdr
from imgpipe.components.image_example_gen import image_codec, walk
from imgpipe.components.image_example_gen.convert import run_conversion
from imgpipe.components.image_example_gen.options import VERIFY_DECODE, ImageOptions, OutputOptions
from imgpipe.components.image_statistics import anomalies
from imgpipe.components.image_statistics.analyze import AnalysisOptions, BatchDecoder, analyze_batch
from imgpipe.components.image_statistics.config import StatisticsConfig
from imgpipe.components.image_statistics.produce import produce
from tests import imagegen, jpeg_tools
from tests.trees import make_deep, touch

pytestmark = pytest.mark.component

# When the FIFO watchdog frees a reader blocked on a FIFO, which would never end. It
# decides no outcome of a run that is slow but not blocked (a FIFO nobody opened is not
# "freed"): only how long a run that opened one hangs before its test fails.
TIMEOUT_SECONDS = 240


def corrupt_entropy_jpeg() -> bytes:
    """Valid markers around entropy-coded data with a run of garbage in the middle:
    TensorFlow decodes it, leniently, into wrong pixels."""
    data = bytearray(imagegen.jpeg_bytes(imagegen.photo_like(96, 96, seed=5)))
    middle = len(data) // 2
    data[middle : middle + 60] = np.random.default_rng(1).integers(1, 255, 60, np.uint8).tobytes()
    return bytes(data)


def marker_flood_jpeg() -> bytes:
    """A small JPEG with 100,000 empty comments after its scan: libjpeg reads them all."""
    photo = imagegen.jpeg_bytes(imagegen.photo_like(16, 16))
    end = photo.rindex(b"\xff\xd9")
    return photo[:end] + b"\xff\xfe\x00\x02" * 100_000 + photo[end:]


def with_stray_byte(jpeg: bytes) -> bytes:
    """The JPEG with a comment and a stray byte before its first scan."""
    sos = jpeg.index(b"\xff\xda")
    return jpeg[:sos] + b"\xff\xfe\x00\x02\x00" + jpeg[sos:]


# What a file can cost, whatever its coding: scans of a sequential JPEG, Huffman or
# arithmetic, counted as a progressive one's are; coded bytes, not a comment's padding,
# against the size the header claims; a bounded marker walk. Path -> (bytes, reason).
def cost_bombs() -> dict[str, tuple[bytes, str]]:
    return {
        "cat/sequential-scan-bomb.jpg": (
            jpeg_tools.sequential_with_scans(2000, arithmetic=True),
            "sequential jpeg with more than 100 scans",
        ),
        "cat/sequential-huffman-scan-bomb.jpg": (
            jpeg_tools.sequential_with_scans(2000),
            "sequential jpeg with more than 100 scans",
        ),
        "cat/padded-arithmetic-bomb.jpg": (
            jpeg_tools.padded_arithmetic_bomb(),
            "truncated or corrupt jpeg",
        ),
        # libjpeg skips a stray byte between segments (with a warning): so does the walk.
        "cat/stray-byte-scan-bomb.jpg": (
            with_stray_byte(jpeg_tools.sequential_with_scans(2000)),
            "sequential jpeg with more than 100 scans",
        ),
        "cat/marker-flood.jpg": (marker_flood_jpeg(), "corrupt jpeg"),
    }


def corrupt_body_png() -> bytes:
    data = bytearray(imagegen.png_bytes(imagegen.photo_like(32, 32)))
    data[60:200] = bytes(140)  # IDAT corrupt, IEND intact
    return bytes(data)


class FifoWatchdog:
    """Frees any reader blocked on the FIFOs once the time is up, and says so: a run
    that opened one would otherwise never end."""

    def __init__(self, fifos: list[str], seconds: float):
        self.fifos = fifos
        self.freed: list[str] = []
        self._timer = threading.Timer(seconds, self._free)

    def _free(self) -> None:
        for fifo in self.fifos:
            try:
                os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
                self.freed.append(fifo)  # a reader was waiting on it
            except OSError as e:
                assert e.errno == errno.ENXIO  # no reader: nobody opened it

    def __enter__(self) -> FifoWatchdog:
        self._timer.start()
        return self

    def __exit__(self, *exc) -> None:
        self._timer.cancel()
        self._free()


@pytest.fixture(scope="module")
def hostile(tmp_path_factory, make_pipeline):
    base = tmp_path_factory.mktemp("hostile")
    outside = base / "outside"
    touch(str(outside / "secret.txt"), b"SECRET-OUTSIDE-BYTES\n")
    outside_photo = imagegen.jpeg_bytes(imagegen.photo_like(40, 40, seed=77))
    touch(str(outside / "dir" / "photo.jpg"), outside_photo)
    os.mkfifo(outside / "dir" / "fifo.jpg")
    root = base / "root"
    imagegen.make_image_folder(str(root), {"cat": 6, "dog": 6})
    good = imagegen.jpeg_bytes(imagegen.photo_like(40, 40, seed=3))
    gif = imagegen.pillow_bytes(Image.fromarray(imagegen.photo_like(40, 40)).convert("P"), "GIF")
    webp = imagegen.pillow_bytes(Image.fromarray(imagegen.photo_like(40, 40)), "WEBP")
    files = {
        "cat/esc\x1b[31m.jpg": good,
        "cat/new\nline.jpg": good,
        "cat/ spaced .jpg": good,
        "cat/corrupt-entropy.jpg": corrupt_entropy_jpeg(),
        "dog/corrupt-body.png": corrupt_body_png(),
        "cat/empty.jpg": b"",
        "cat/text.jpg": b"I am text with an image's name\n",
        "cat/truncated.jpg": good[: len(good) // 2],
        "cat/truncated.gif": gif[: len(gif) // 2],
        "cat/truncated.webp": webp[: len(webp) // 2],
        "cat/lying.jpg": imagegen.lying_jpeg(10000, 10000),
        "cat/frame-bomb.gif": imagegen.gif_bytes((1, 1), [(0, 0, 60000, 60000)]),
        "cat/animated.gif": imagegen.gif_bytes((1, 1), [(0, 0, 1, 1), (0, 0, 20000, 20000)]),
        "dog/animated.png": imagegen.animated_bytes("PNG", later=(20000, 20000)),
        "dog/animated.webp": imagegen.animated_bytes("WEBP", later=(16000, 16000)),
        # JPEG codings no Python encoder writes, made by libjpeg-turbo's jpegtran.
        "cat/arithmetic-bomb.jpg": jpeg_tools.arithmetic_bomb(4000),
        "cat/scan-bomb.jpg": jpeg_tools.progressive_with_scans(2000),
        "cat/lossless.jpg": jpeg_tools.lossless_grey(),
        "dog/arithmetic.jpg": jpeg_tools.arithmetic_photo(),
        "dog/progressive-64-scans.jpg": jpeg_tools.progressive_with_scans(0),
        "dog/sequential-3-scans.jpg": jpeg_tools.sequential_with_scans(0, arithmetic=True),
        **{path: data for path, (data, _) in cost_bombs().items()},
        " owl/a.jpg": good,
        "stray.jpg": good,
        "notes.txt": b"not an image\n",
    }
    for relpath, data in files.items():
        touch(str(root / relpath), data)
    touch(os.fsencode(str(root)) + b"/cat/caf\xe9.jpg", good)
    with open(root / "dog" / "huge.jpg", "wb") as f:
        f.truncate(ImageOptions().max_file_bytes + 1)  # sparse: takes no space
    os.mkfifo(root / "cat" / "fifo.jpg")
    server = socket.socket(socket.AF_UNIX)
    server.bind(str(root / "cat" / "socket.jpg"))
    server.close()
    os.mknod(root / "cat" / "null.jpg", stat.S_IFCHR | 0o600, os.makedev(1, 3))
    os.symlink("img_000.jpg", root / "cat" / "inside.jpg")
    os.symlink("missing.jpg", root / "cat" / "dangling.jpg")
    os.symlink(outside / "secret.txt", root / "cat" / "secret.jpg")
    os.symlink("/dev/zero", root / "cat" / "zero.jpg")
    os.symlink(outside / "dir", root / "elsewhere")
    os.symlink("..", root / "cat" / "up")
    os.symlink(".", root / "loop")
    make_deep(str(root), 260, "d" * 19)

    out = str(base / "out")
    fifos = [str(root / "cat" / "fifo.jpg"), str(outside / "dir" / "fifo.jpg")]
    with FifoWatchdog(fifos, TIMEOUT_SECONDS) as watchdog:
        result = run_conversion(
            str(root),
            out,
            ImageOptions(),
            OutputOptions(num_shards=1, follow_links=True),
            make_pipeline,
        )
    return {
        "out": out,
        "result": result,
        "freed": watchdog.freed,
        "outside_sha256": hashlib.sha256(outside_photo).hexdigest(),
    }


def read_records(out: str) -> list[tf.train.Example]:
    records = []
    for split in ("train", "eval"):
        for path in tf.io.gfile.glob(artifacts.split_shard_pattern(out, split)):
            records += [
                tf.train.Example.FromString(r.numpy()) for r in tf.data.TFRecordDataset(path)
            ]
    return records


def test_the_run_ends_without_opening_a_fifo(hostile):
    assert hostile["freed"] == []


def test_every_entry_is_written_skipped_or_ignored_with_its_reason(hostile):
    out = hostile["out"]
    skipped = {row["path"]: row["reason"] for row in artifacts.load_skipped(out)}
    with open(os.path.join(out, "ignored.json")) as f:
        ignored = {row["path"]: row["reason"] for row in json.load(f)}
    deep = [path for path in skipped if path.startswith("ddd")]
    assert len(deep) == 1 and skipped.pop(deep[0]) == "unreadable: File name too long"
    assert {path: reason.split(":")[0] for path, reason in skipped.items()} == {
        "cat/empty.jpg": "empty file (0 bytes)",
        "cat/text.jpg": "not an image",
        "cat/truncated.jpg": "truncated jpeg",
        "cat/truncated.gif": "truncated gif",
        "cat/truncated.webp": "truncated or corrupt webp",
        "cat/lying.jpg": "truncated or corrupt jpeg",
        "cat/arithmetic-bomb.jpg": "truncated or corrupt jpeg",
        "cat/scan-bomb.jpg": "progressive jpeg with more than 100 scans",
        **{path: reason for path, (_, reason) in cost_bombs().items()},
        "cat/lossless.jpg": "lossless jpeg",
        "cat/frame-bomb.gif": "decompression bomb",
        "cat/animated.gif": "decompression bomb",
        "dog/animated.png": "decompression bomb",
        "dog/animated.webp": "decompression bomb",
        "dog/huge.jpg": "file too large",
        "cat/fifo.jpg": "special file (fifo)",
        "cat/socket.jpg": "special file (socket)",
        "cat/null.jpg": "special file (character device)",
        "cat/caf\\xe9.jpg": walk.NAME_NOT_UTF8.split(":")[0],
        "cat/dangling.jpg": walk.LINK_DANGLING.split(":")[0],
        " owl/a.jpg": "label folder ' owl' cannot be a class",
        "stray.jpg": "image outside a label folder",
    }
    assert "frame 1: 20000x20000" in skipped["dog/animated.png"]
    assert ignored == {
        "notes.txt": "not an image file name",
        "cat/up": walk.LINK_LOOP,
        "loop": walk.LINK_LOOP,
        "cat/secret.jpg": walk.LINK_OUTSIDE_ROOT,
        "cat/zero.jpg": walk.LINK_OUTSIDE_ROOT,
        "elsewhere": walk.LINK_OUTSIDE_ROOT,
    }

    summary = conversion_summary.read(out)
    # 12 generated + the ESC, newline and spaced names + inside.jpg (a link) + the two
    # corrupt images that only a decode can find + the arithmetic, 64-scan and
    # 3-scan sequential JPEGs.
    assert (summary.written, summary.skipped, summary.ignored) == (21, 27, 6)
    assert summary.files_seen == summary.written + summary.skipped + summary.ignored
    names = {
        r.features.feature[fk.FILENAME_KEY].bytes_list.value[0].decode() for r in read_records(out)
    }
    assert {
        "cat/esc\x1b[31m.jpg",
        "cat/new\nline.jpg",
        "cat/ spaced .jpg",
        "cat/inside.jpg",
    } <= names
    assert len(names) == summary.written


def test_nothing_outside_the_root_is_read(hostile):
    out = hostile["out"]
    for name in os.listdir(out):
        if name.endswith(".json") or name.endswith(".txt"):
            with open(os.path.join(out, name), "rb") as f:
                assert b"SECRET" not in f.read(), name
    digests = {
        r.features.feature[fk.SHA256_KEY].bytes_list.value[0].decode() for r in read_records(out)
    }
    assert hostile["outside_sha256"] not in digests


def test_the_statistics_name_the_corrupt_images_the_conversion_kept(
    hostile, tmp_path, make_pipeline
):
    out = hostile["out"]
    produced = produce(
        out,
        hostile["result"].split_names,
        str(tmp_path),
        AnalysisOptions(32, 0.875),
        StatisticsConfig(),
        make_pipeline,
    )
    unusable = [a for a in produced.stats.anomalies if a.code == anomalies.UNUSABLE_IMAGES]
    assert unusable, "corrupt images must stop the run before training"
    reasons = {
        f.path: f.reason for s in produced.stats.splits.values() for f in s.undecodable_files
    }
    assert set(reasons) == {"cat/corrupt-entropy.jpg", "dog/corrupt-body.png"}
    assert reasons["cat/corrupt-entropy.jpg"].startswith("corrupt jpeg: Corrupt JPEG data")
    # TensorFlow's own words, not its "Graph execution error:" wrapper.
    assert reasons["dog/corrupt-body.png"].startswith("TensorFlow cannot decode it: ")
    assert "Graph execution" not in reasons["dog/corrupt-body.png"]
    assert "PNG" in reasons["dog/corrupt-body.png"]
    message = anomalies.gate_message(produced.stats.anomalies, out, StatisticsConfig())
    assert "cat/corrupt-entropy.jpg" in message
    # No name reaches the page or the terminal with its control characters.
    assert "\x1b" not in produced.html and "\x1b" not in message


def test_the_cost_bombs_are_real_and_refused_by_decoding_conversion_and_statistics():
    """Each decodes in TensorFlow (each is a real cost, not a corrupt file), and is refused
    from its headers by a conversion that decodes every image and by the statistics
    over records that no conversion checked."""
    records = []
    for path, (data, reason) in cost_bombs().items():
        header = image_formats.read_header(data)
        assert tf.io.decode_jpeg(data).shape[:2] == (header.height, header.width), path
        with pytest.raises(hdr.ImageHeaderError, match=reason):
            image_codec.convert_image(data, ImageOptions(verify=VERIFY_DECODE))
        example = tf.train.Example()
        example.features.feature[fk.IMAGE_ENCODED_KEY].bytes_list.value.append(data)
        example.features.feature[fk.FILENAME_KEY].bytes_list.value.append(path.encode())
        records.append(example.SerializeToString())
    accumulator, _ = analyze_batch(
        records, "train", BatchDecoder(32, 0.875), AnalysisOptions(32, 0.875)
    )
    assert accumulator.images == 0
    reasons = dict(accumulator.failures)
    assert set(reasons) == set(cost_bombs())
    for path, (_, reason) in cost_bombs().items():
        assert reasons[path].startswith(reason), (path, reasons[path])
