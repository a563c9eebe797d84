"""Room on the output filesystem: a pass-through conversion that cannot fit is refused
before it writes anything, and a full disk ends in one line that says how much room is
needed, with nothing left behind."""

from __future__ import annotations

import errno
import os
import subprocess

import pytest

from imgpipe.components.common.storage import disk_full, fileio
from imgpipe.components.image_example_gen import free_space
from imgpipe.pipelines import cli
from tests import imagegen

IN_PROCESS = ["--runner=DirectRunner", "--direct_num_workers=1", "--no-progress"]


@pytest.mark.unit
def test_enospc_is_recognised_as_raised_and_as_beam_wraps_it():
    with pytest.raises(OSError) as full:
        with open("/dev/full", "wb") as f:
            f.write(b"x")
    assert full.value.errno == errno.ENOSPC
    assert disk_full.is_out_of_space(full.value)
    assert disk_full.is_out_of_space(RuntimeError(f"OSError: {full.value} [while running 'X']"))
    assert not disk_full.is_out_of_space(RuntimeError("other"))
    message = str(free_space.out_of_space("/out", 100 * 2**20))
    assert message.startswith("no space left on the filesystem of /out: a conversion needs")
    assert "(about 202.0 MB for output the size of its input)" in message
    assert "\n" not in message


@pytest.mark.component
def test_a_conversion_that_cannot_fit_is_refused_before_it_writes(tmp_path, capsys):
    src, out = str(tmp_path / "src"), str(tmp_path / "out")
    imagegen.make_image_folder(src, {"a": 2, "b": 2})
    free = fileio.free_bytes(out)
    assert free is not None
    with open(os.path.join(src, "a", "huge.jpg"), "wb") as f:
        f.truncate(free)  # sparse: its size is counted, no space is used

    assert cli.main(["convert", src, out, *IN_PROCESS]) == 1

    error = capsys.readouterr().err.strip()
    assert error.startswith(f"imgpipe: error: {out} is on a filesystem with ")
    images = sum(os.path.getsize(os.path.join(d, n)) for d, _, ns in os.walk(src) for n in ns)
    needed = free_space.human_size(free_space.needed_bytes(images))
    assert f"but this conversion needs about {needed} there" in error
    assert "\n" not in error
    assert os.listdir(out) == []


@pytest.fixture
def small_filesystem(tmp_path):
    """A 256 KB tmpfs (needs root, as CI and the Debian 13 root filesystem have)."""
    mount = tmp_path / "small"
    mount.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", str(mount)], capture_output=True
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.decode().strip()}")
    yield str(mount)
    # Lazily: the failed bundle's spill file stays open until its DoFn is collected.
    subprocess.run(["umount", "--lazy", str(mount)], check=True)


@pytest.mark.component
def test_a_full_disk_ends_in_one_line_and_leaves_nothing(tmp_path, small_filesystem, capsys):
    src, out = str(tmp_path / "src"), os.path.join(small_filesystem, "out")
    imagegen.make_image_folder(src, {"a": 20, "b": 20}, size=(96, 96))

    # PNG output of noisy photos is larger than its JPEG input: no preflight applies.
    assert cli.main(["convert", src, out, "--format", "png", *IN_PROCESS]) == 1

    error = capsys.readouterr().err.strip()
    assert error.startswith(
        f"imgpipe: error: no space left on the filesystem of {out}: a conversion needs about "
        "twice its output's size free there (about "
    )
    assert "\n" not in error
    assert os.listdir(out) == []


@pytest.mark.component
def test_stats_on_a_full_disk_names_what_and_where_and_leaves_nothing(
    tmp_path, small_filesystem, capsys
):
    src, shards = str(tmp_path / "src"), str(tmp_path / "shards")
    imagegen.make_image_folder(src, {"a": 20, "b": 20}, size=(96, 96))
    assert cli.main(["convert", src, shards, *IN_PROCESS]) == 0
    capsys.readouterr()
    # A tmpfs of 256 KB, less what a filler takes: room for the statistics, not the report.
    with open(os.path.join(small_filesystem, "filler"), "wb") as f:
        f.write(b"\0" * (256 - 24) * 1024)
    report = os.path.join(small_filesystem, "r.html")
    argv = ["stats", shards, "--json", os.path.join(small_filesystem, "s.json")]
    assert cli.main([*argv, "--html", report, *IN_PROCESS[:2]]) == 1

    error = capsys.readouterr().err.strip()
    assert error == (
        f"imgpipe: error: imgpipe stats: no space left on the filesystem of {report}; free some "
        "space there, or point the output (--pipeline-root, the output folder) at a larger "
        "filesystem"
    )
    assert sorted(os.listdir(small_filesystem)) == ["filler"]


@pytest.mark.unit
def test_a_failed_atomic_write_leaves_no_temporary_file_and_names_its_file(tmp_path):
    folder = tmp_path / "ro"
    folder.mkdir()
    target = str(folder / "x.json")
    os.symlink("/dev/full", target + fileio.ATOMIC_TEMP_SUFFIX)
    with pytest.raises(OSError) as raised:
        fileio.write_atomic(target, b"data")
    assert raised.value.errno == errno.ENOSPC and raised.value.filename == target
    assert os.listdir(folder) == []
    assert (
        disk_full.explain(raised.value, "Pusher", "/serving")
        .args[0]
        .startswith(f"Pusher: no space left on the filesystem of {target}; ")
    )


@pytest.mark.component
def test_a_push_onto_a_full_disk_names_the_pusher_and_leaves_nothing(tmp_path, small_filesystem):
    """The Pusher's copy runs out of room: one user error naming the Pusher and the serving
    folder (it was `internal error: ResourceExhaustedError ... (a bug)`), no staging folder
    left, nothing that a reader takes for a push."""
    from google.protobuf import json_format
    from tfx.proto import pusher_pb2
    from tfx.types import standard_artifacts

    from imgpipe.components.common.formats import served_models
    from imgpipe.components.pusher import executor as pusher
    from imgpipe.pipelines.cli import errors

    model = standard_artifacts.Model()
    model.uri = str(tmp_path / "model")
    serving_model = os.path.join(model.uri, "Format-Serving")
    os.makedirs(os.path.join(serving_model, "variables"))
    with open(os.path.join(serving_model, "saved_model.pb"), "wb") as f:
        f.write(os.urandom(64 << 10))
    with open(os.path.join(serving_model, "variables", "variables.data-00000-of-00001"), "wb") as f:
        f.write(os.urandom(512 << 10))  # twice the filesystem
    os.makedirs(os.path.join(serving_model, served_models.ASSETS_EXTRA_DIR))
    with open(os.path.join(serving_model, served_models.ASSETS_EXTRA_DIR, "labels.txt"), "w") as f:
        f.write("a\nb\n")
    blessing = standard_artifacts.ModelBlessing()
    blessing.uri = str(tmp_path / "blessing")
    os.makedirs(blessing.uri)
    blessing.set_int_custom_property("blessed", 1)
    pushed = standard_artifacts.PushedModel()
    pushed.uri = str(tmp_path / "pushed")
    serving = os.path.join(small_filesystem, "serving")
    destination = pusher_pb2.PushDestination(
        filesystem=pusher_pb2.PushDestination.Filesystem(base_directory=serving)
    )
    with pytest.raises(disk_full.DiskFullError) as raised:
        pusher.Executor().Do(
            {"model": [model], "model_blessing": [blessing]},
            {"pushed_model": [pushed]},
            {"push_destination": json_format.MessageToJson(destination)},
        )
    line = errors.one_line(raised.value)
    assert line.startswith("imgpipe: error: Pusher: no space left on the filesystem of ")
    assert serving in line and "\n" not in line
    # The fix names the setting that moves the serving folder, not the pipeline root.
    assert line.endswith("point --serving-dir (serving_dir) at a larger filesystem")
    assert [n for n in os.listdir(serving) if n.startswith(".push-") or n.isdigit()] == []
    assert served_models.find(serving).model is None
