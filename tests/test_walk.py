"""Walking hostile trees: links out of the root and in loops, special files, names that
are not UTF-8 or that drive a terminal, unreadable folders, deep nesting. Nothing
outside the root is read, nothing special is opened, and every entry is accounted for."""

from __future__ import annotations

import json
import os
import pathlib
import shutil
import socket
import stat
import tempfile

import pytest
import tensorflow as tf

from imgpipe.components.common.runtime.printable import printable, printable_bytes
from imgpipe.components.common.runtime.tf_errors import op_error_reason
from imgpipe.components.image_example_gen import driver, listing, transforms, walk
from imgpipe.components.image_example_gen.options import ImageOptions
from imgpipe.components.image_example_gen.tasks import ConversionTask
from tests import imagegen
from tests.trees import make_deep, touch

pytestmark = pytest.mark.unit

NOBODY = 65534
FIFO_READ = "special file (fifo): not read"


@pytest.fixture
def hostile_tree(tmp_path):
    """A root with every kind of entry that must not be read, beside an outside folder
    (the links' targets) that must never be read either."""
    outside = tmp_path / "outside"
    touch(str(outside / "secret.txt"), b"SECRET-OUTSIDE-BYTES\n")
    touch(str(outside / "dir" / "photo.jpg"))
    os.mkfifo(outside / "dir" / "fifo.jpg")
    root = tmp_path / "root"
    cat = str(root / "cat")
    touch(f"{cat}/a.jpg")
    touch(f"{cat}/esc\x1b[2J.jpg")
    touch(f"{cat}/new\nline.jpg")
    touch(f"{cat}/ spaced .jpg")
    touch(os.fsencode(cat) + b"/caf\xe9.jpg")
    touch(os.fsencode(str(root)) + b"/bad\xffdir/x.jpg")
    os.mkfifo(f"{cat}/fifo.jpg")
    server = socket.socket(socket.AF_UNIX)
    server.bind(f"{cat}/socket.jpg")
    server.close()
    os.mknod(f"{cat}/null.jpg", stat.S_IFCHR | 0o600, os.makedev(1, 3))
    os.mknod(f"{cat}/loop0.jpg", stat.S_IFBLK | 0o600, os.makedev(7, 0))
    os.symlink("a.jpg", f"{cat}/inside.jpg")
    os.symlink("missing.jpg", f"{cat}/dangling.jpg")
    os.symlink("ping.jpg", f"{cat}/pong.jpg")
    os.symlink("pong.jpg", f"{cat}/ping.jpg")
    os.symlink(outside / "secret.txt", f"{cat}/secret.jpg")
    os.symlink(outside / "dir", root / "elsewhere")
    os.symlink("..", f"{cat}/up")
    os.symlink(".", root / "loop")
    os.symlink("cat", root / "dog")
    os.symlink("cat", root / "fox")
    os.symlink("/dev/zero", f"{cat}/zero.jpg")
    make_deep(str(root), 260, "d" * 19)
    return str(root), str(outside)


LINKS = {
    "cat/dangling.jpg",
    "cat/inside.jpg",
    "cat/ping.jpg",
    "cat/pong.jpg",
    "cat/secret.jpg",
    "cat/up",
    "cat/zero.jpg",
    "dog",
    "elsewhere",
    "fox",
    "loop",
}
SPECIAL = {
    "cat/fifo.jpg": FIFO_READ,
    "cat/socket.jpg": "special file (socket): not read",
    "cat/null.jpg": "special file (character device): not read",
    "cat/loop0.jpg": "special file (block device): not read",
}
FILES = ["cat/ spaced .jpg", "cat/a.jpg", "cat/esc\x1b[2J.jpg", "cat/new\nline.jpg"]


def _too_deep(tree: walk.Tree) -> list[walk.Unlisted]:
    return [e for e in tree.unlisted if e.reason.endswith(": File name too long")]


def test_by_default_no_link_is_followed_and_nothing_special_is_read(hostile_tree):
    root, _ = hostile_tree
    tree = walk.walk_tree(root)
    assert tree.files == FILES
    reasons = {e.relpath: (e.reason, e.skipped) for e in tree.unlisted if e not in _too_deep(tree)}
    assert reasons == {
        **{path: (walk.LINK_NOT_FOLLOWED, False) for path in LINKS},
        **{path: (reason, True) for path, reason in SPECIAL.items()},
        "cat/caf\\xe9.jpg": (walk.NAME_NOT_UTF8, True),
        "bad\\xffdir/x.jpg": (walk.NAME_NOT_UTF8, True),
    }
    # Deeper than PATH_MAX: the folder that cannot be opened is reported, once.
    assert len(_too_deep(tree)) == 1 and _too_deep(tree)[0].skipped


def test_followed_links_stay_inside_the_root_and_never_loop(hostile_tree):
    root, _ = hostile_tree
    tree = walk.walk_tree(root, follow_links=True)
    # dog -> cat is followed once; fox -> cat, the second link to it, is not.
    assert tree.files == sorted(
        FILES + [f.replace("cat/", "dog/") for f in FILES] + ["cat/inside.jpg", "dog/inside.jpg"]
    )
    reasons = {e.relpath: e.reason for e in tree.unlisted if e not in _too_deep(tree)}
    for prefix in ("cat", "dog"):
        assert reasons[f"{prefix}/up"] == walk.LINK_LOOP
        assert reasons[f"{prefix}/secret.jpg"] == walk.LINK_OUTSIDE_ROOT
        assert reasons[f"{prefix}/zero.jpg"] == walk.LINK_OUTSIDE_ROOT
        assert reasons[f"{prefix}/dangling.jpg"] == walk.LINK_DANGLING
        assert reasons[f"{prefix}/ping.jpg"].startswith("unreadable symbolic link: Too many levels")
        assert reasons[f"{prefix}/fifo.jpg"] == FIFO_READ
    assert reasons["loop"] == walk.LINK_LOOP
    assert reasons["fox"] == walk.LINK_REPEATED
    assert reasons["elsewhere"] == walk.LINK_OUTSIDE_ROOT
    assert not any("outside" in path or "SECRET" in path for path in tree.files + list(reasons))


def test_the_listing_counts_every_entry_once(hostile_tree):
    root, _ = hostile_tree
    for follow_links in (False, True):
        tree = walk.walk_tree(root, follow_links)
        result = listing.list_images(root, follow_links=follow_links)
        assert result.files_seen == len(tree.files) + len(tree.unlisted)
        assert {f.relpath for f in result.ignored + result.skipped} | {
            i.relpath for i in result.images
        } == set(tree.files) | {e.relpath for e in tree.unlisted}
        # Ignored reasons are counted by reason in the summary: no per-file text in them.
        assert all("/" not in f.reason for f in result.ignored)


def test_the_fingerprint_covers_links_and_changes_with_them(hostile_tree):
    root, _ = hostile_tree
    before = driver.tree_fingerprint(root)
    assert before == driver.tree_fingerprint(root)
    assert ",num_files:" in before
    os.symlink("a.jpg", os.path.join(root, "cat", "another.jpg"))
    assert driver.tree_fingerprint(root) != before


def test_unreadable_folders_and_files_are_reported_and_the_walk_goes_on():
    # Root reads everything: the walk and the read run in a child as nobody, in a
    # folder nobody may enter (pytest's own are root's alone).
    base = tempfile.mkdtemp(prefix="imgpipe-walk-")
    try:
        _walk_as_nobody(pathlib.Path(base))
    finally:
        shutil.rmtree(base)


def _walk_as_nobody(tmp_path: pathlib.Path) -> None:
    root = tmp_path / "root"
    touch(str(root / "cat" / "a.jpg"))
    touch(str(root / "cat" / "locked.jpg"))
    touch(str(root / "locked" / "b.jpg"))
    os.chmod(root / "cat" / "locked.jpg", 0)
    os.chmod(root / "locked", 0)
    for path in (tmp_path, root, root / "cat"):
        os.chmod(path, 0o755)
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child reports through the pipe
        try:
            os.setgid(NOBODY)
            os.setuid(NOBODY)
            tree = walk.walk_tree(str(root))
            task = ConversionTask("cat/locked.jpg", "cat", 0, "train")
            converted = transforms.convert_task(str(root), task, ImageOptions())
            report = {
                "files": tree.files,
                "unlisted": [[e.relpath, e.reason, e.skipped] for e in tree.unlisted],
                "read": converted.error,
            }
            os.write(write_end, json.dumps(report).encode())
        finally:
            os._exit(0)
    os.close(write_end)
    with os.fdopen(read_end) as pipe:
        report = json.loads(pipe.read())
    os.waitpid(pid, 0)
    assert report == {
        "files": ["cat/a.jpg", "cat/locked.jpg"],
        "unlisted": [["locked", "unreadable folder: Permission denied", True]],
        "read": "unreadable: Permission denied",
    }


def test_a_special_file_is_refused_before_it_is_opened(tmp_path):
    fifo = tmp_path / "cat" / "fifo.jpg"
    fifo.parent.mkdir()
    os.mkfifo(fifo)
    # A read would block for good: no writer ever comes.
    task = ConversionTask("cat/fifo.jpg", "cat", 0, "train")
    converted = transforms.convert_task(str(tmp_path), task, ImageOptions())
    assert converted.error is not None
    assert converted.error.startswith("not a regular file (mode p")
    big = tmp_path / "cat" / "big.jpg"
    with open(big, "wb") as f:
        f.truncate(ImageOptions(max_pixels=10).max_file_bytes + 1)  # sparse
    task = ConversionTask("cat/big.jpg", "cat", 0, "train")
    converted = transforms.convert_task(str(tmp_path), task, ImageOptions(max_pixels=10))
    assert converted.error is not None and converted.error.startswith("file too large")


def test_a_bad_file_under_on_error_fail_is_named_escaped():
    fn = transforms.ConvertImageFn("/root", "/spill", ImageOptions(), fail_on_error=True)
    task = ConversionTask("cat/\x1b[2Jx\n.jpg", "cat", 0, "train")
    with pytest.raises(transforms.ImageConversionError) as raised:
        list(fn._skip(task, "empty file (0 bytes)"))
    assert str(raised.value) == "cat/\\x1b[2Jx\\x0a.jpg: empty file (0 bytes)"


@pytest.mark.parametrize(
    "text, shown",
    [
        ("cat/a.jpg", "cat/a.jpg"),
        ("café/猫.jpg", "café/猫.jpg"),
        ("a b.jpg", "a b.jpg"),
        ("\x1b]0;pwned\x07x.jpg", "\\x1b]0;pwned\\x07x.jpg"),
        ("a\r\nb", "a\\x0d\\x0ab"),
        ("\u202egpj.exe", "\\u202egpj.exe"),
        ("a\u2028b\x85", "a\\u2028b\\x85"),
        ("back\\slash", "back\\\\slash"),
        (os.fsdecode(b"caf\xe9"), "caf\\xe9"),
    ],
)
def test_names_are_shown_escaped(text, shown):
    assert printable(text) == shown
    assert printable(text).isprintable()


def test_undecodable_bytes_are_shown_as_escaped_bytes():
    assert printable_bytes(b"caf\xc3\xa9/\xff\xfe.jpg") == "café/\\xff\\xfe.jpg"


def test_tensorflow_errors_keep_the_decoders_own_words():
    graph = (
        "Graph execution error:\n\nDetected at node map/while/DecodeImage defined at (most "
        'recent call last):\n  File "/x/analyze.py", line 31, in <module>\n\n  File "/x/a.py",'
        " line 30, in f\n\nUnknown image file format. One of JPEG, PNG, GIF, BMP required.\n"
        "\t [[{{node map/while/DecodeImage}}]] [Op:__inference_f_129]"
    )
    assert (
        op_error_reason(graph) == "Unknown image file format. One of JPEG, PNG, GIF, BMP required."
    )
    eager = (
        "{{function_node __wrapped__DecodePng_device_/job:localhost/replica:0/task:0/device:CPU:0}}"
        " Invalid PNG data, size 10395 [Op:DecodePng]"
    )
    assert op_error_reason(eager) == "Invalid PNG data, size 10395"


def test_an_object_store_tree_is_walked_and_read_through_gfile():
    # TensorFlow's in-memory filesystem stands in for gs:// and s3://: no links, no FIFOs.
    root = "ram://walk-test/root"
    for relpath in ("cat/a.jpg", "cat/deep/b.jpg", "dog/c.jpg", "notes.txt"):
        tf.io.gfile.makedirs(f"{root}/{relpath.rsplit('/', 1)[0]}" if "/" in relpath else root)
        with tf.io.gfile.GFile(f"{root}/{relpath}", "wb") as f:
            f.write(imagegen.jpeg_bytes(imagegen.photo_like(8, 8)))
    tree = walk.walk_tree(root)
    assert tree == walk.Tree(
        ["cat/a.jpg", "cat/deep/b.jpg", "dog/c.jpg", "notes.txt"], [], ["cat", "cat/deep", "dog"]
    )
    assert driver.tree_fingerprint(root).startswith(f"images:{root},num_files:4,")
    converted = transforms.convert_task(
        root, ConversionTask("cat/deep/b.jpg", "cat", 0, "train"), ImageOptions()
    )
    assert converted.error is None and converted.record
    with pytest.raises(FileNotFoundError, match="does not exist or is not a directory"):
        walk.walk_tree("ram://walk-test/missing")
