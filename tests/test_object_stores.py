"""s3:// and gs:// tried for real: the file seam, `imgpipe convert` and its readers, and a
pipeline, against moto's S3 server and a GCS emulator started here on loopback."""

from __future__ import annotations

import json
import os

import pytest

from imgpipe.components.common.formats import manifest, served_models
from imgpipe.components.common.storage import fileio, object_store
from imgpipe.pipelines import cli
from tests import imagegen, object_stores

pytestmark = pytest.mark.platform

IN_PROCESS = ["--runner=DirectRunner", "--direct_num_workers=1"]
SERVERS = {"s3": object_stores.s3_server, "gcs": object_stores.gcs_server}


@pytest.fixture(scope="module", params=sorted(SERVERS))
def store(request):
    with SERVERS[request.param]() as started:
        yield started


def upload_folder(local: str, uri: str) -> None:
    for relpath in fileio.list_files(local):
        fileio.copy(os.path.join(local, relpath), f"{uri}/{relpath}")


def test_the_seam_writes_reads_lists_moves_and_removes(store):
    root = store.uri("seam")
    fileio.makedirs(f"{root}/empty")
    assert fileio.isdir(f"{root}/empty") and fileio.list_dir(f"{root}/empty") == []
    fileio.write_atomic(f"{root}/a/one.bin", b"0123456789")
    fileio.write_text(f"{root}/a/b/two.txt", "two")
    with pytest.raises(ZeroDivisionError), fileio.open_file(f"{root}/a/failed.bin", "wb") as f:
        f.write(b"partial")
        raise ZeroDivisionError  # a writer that fails writes nothing
    with fileio.open_file(f"{root}/a/one.bin") as f:
        f.seek(3)
        assert f.read(4) == b"3456"
    assert fileio.list_dir(root) == ["a", "empty"]
    assert fileio.list_files(root) == ["a/b/two.txt", "a/one.bin"]
    assert fileio.glob(f"{root}/a/*.bin") == [f"{root}/a/one.bin"]
    assert fileio.glob(f"{root}/*/b") == [f"{root}/a/b"]
    assert fileio.size(f"{root}/a/one.bin") == 10
    assert not fileio.exists(f"{root}/a/missing") and not fileio.exists(f"{root}/a/one")
    with pytest.raises(FileNotFoundError, match="missing"):
        fileio.read_bytes(f"{root}/a/missing")

    fileio.rename(f"{root}/a", f"{root}/moved")
    assert fileio.list_files(f"{root}/moved") == ["b/two.txt", "one.bin"]
    assert not fileio.exists(f"{root}/a")
    fileio.remove(f"{root}/moved")
    assert not fileio.exists(f"{root}/moved")

    # TFX's own file I/O (artifact folders, executor outputs) reaches the same store.
    from tfx.dsl.io import fileio as tfx_fileio

    tfx_fileio.makedirs(f"{root}/tfx")
    with tfx_fileio.open(f"{root}/tfx/x.json", "w") as f:
        f.write("{}")
    assert fileio.read_bytes(f"{root}/tfx/x.json") == b"{}"
    assert tfx_fileio.listdir(f"{root}/tfx") == ["x.json"]
    fileio.remove(root)


def test_a_whole_file_read_gets_one_version_while_another_writer_replaces_it(store):
    """As retrains read the serving lock while another replaces it: each read is one
    of the versions, whole (a stat then ranged reads failed on a shorter new version)."""
    import threading

    path = store.uri("replaced/lock.json")
    versions = (b"{}", json.dumps({"holder": "x" * 2000}).encode())
    fileio.write_atomic(path, versions[1])
    done = threading.Event()

    def replace() -> None:
        turn = 0
        while not done.is_set():
            turn += 1
            fileio.write_atomic(path, versions[turn % 2])

    writer = threading.Thread(target=replace)
    writer.start()
    try:
        read = [fileio.read_bytes(path) for _ in range(150)]
    finally:
        done.set()
        writer.join()
    assert set(read) <= set(versions)
    fileio.remove(store.uri("replaced"))


def test_a_store_that_cannot_be_reached_is_one_line_naming_its_settings(monkeypatch, capsys):
    # S3 only: google-cloud-storage retries a refused connection for two minutes.
    nowhere = f"http://{object_stores.HOST}:{object_stores.free_port()}"
    monkeypatch.setenv("AWS_ENDPOINT_URL_S3", nowhere)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "test")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "test")
    monkeypatch.setenv("AWS_MAX_ATTEMPTS", "1")
    with pytest.raises(object_store.ObjectStoreError) as raised:
        fileio.exists("s3://bucket/anything")
    message = str(raised.value)
    assert "\n" not in message and "s3://bucket/anything" in message
    assert "AWS_ENDPOINT_URL_S3" in message

    assert cli.main(["convert", "s3://bucket/photos", "s3://bucket/out", *IN_PROCESS]) == 1
    line = capsys.readouterr().err.strip().splitlines()[-1]
    assert line.startswith("imgpipe: error: s3://bucket/photos") and "AWS_ENDPOINT_URL_S3" in line

    # KFP's own scheme for MinIO is refused with the s3:// path to give instead.
    assert cli.main(["convert", "minio://bucket/photos", "out", *IN_PROCESS]) == 1
    line = capsys.readouterr().err.strip().splitlines()[-1]
    assert line.startswith("imgpipe: error: minio://bucket/photos: minio:// is KFP's own")
    assert "give s3://bucket/photos and set AWS_ENDPOINT_URL_S3" in line


def test_convert_from_the_store_to_the_store_and_its_readers(store, tmp_path, capsys):
    local = str(tmp_path / "photos")
    imagegen.make_colour_folder(local, per_class=4)
    data_root, out = store.uri("data"), store.uri("examples")
    upload_folder(local, data_root)

    argv = ["convert", data_root, out, "--eval-fraction", "0.25", "--shards", "2"]
    assert cli.main([*argv, "--no-progress", "--seed", "1", *IN_PROCESS]) == 0
    capsys.readouterr()

    # Published whole: the manifest lists every file, and no work folder is left.
    listed = manifest.verify(out, checksums=True)
    assert sorted([*listed.files, "manifest.json"]) == fileio.list_files(out)
    summary = json.loads(fileio.read_bytes(f"{out}/conversion_summary.json"))
    assert summary["written"] == len(fileio.list_files(local))

    html = str(tmp_path / "report.html")
    assert (
        cli.main(
            ["stats", out, "--json", str(tmp_path / "stats.json"), "--html", html, *IN_PROCESS]
        )
        == 0
    )
    stats = json.loads((tmp_path / "stats.json").read_text())
    assert stats


@pytest.fixture(scope="module")
def s3_store():
    with object_stores.s3_server() as started:
        yield started


def test_a_local_pipeline_reads_and_writes_only_the_store(s3_store, tmp_path, capsys):
    """Data root, pipeline root and serving dir on the store; the Trainer reads its shards
    from there. Only the metadata database is local (SQLite). S3 only, to keep the tier
    short: gs:// takes the same code paths but the client (tested above)."""
    store = s3_store
    from imgpipe.pipelines import component_ids as ids
    from imgpipe.pipelines import config as cfg
    from imgpipe.pipelines import local_runner

    local = str(tmp_path / "photos")
    imagegen.make_colour_folder(local, per_class=6)
    data, root, serving = (
        store.uri("p", "images"),
        store.uri("p", "root"),
        store.uri("p", "serving"),
    )
    upload_folder(local, data)
    settings = tmp_path / "config.yaml"
    settings.write_text(
        "pipeline_name: object-store\n"
        "trainer: {backbone: tiny_cnn, image_size: 32, epochs: 1, batch_size: 4,"
        " train_steps: 24, eval_steps: 1}\n"
        "evaluator: {significance: 0, majority_margin: 0}\n"
        "beam_args: [--direct_num_workers=1, --direct_running_mode=in_memory]\n"
    )
    argv = ["run", "local", "--data", data, "--config", str(settings)]
    argv += ["--pipeline-root", root, "--serving-dir", serving]

    assert cli.main(argv) == 1
    line = capsys.readouterr().err.strip().splitlines()[-1]
    assert line.startswith("imgpipe: error: metadata_path ") and "local file" in line

    settings.write_text(settings.read_text() + f"metadata_path: {tmp_path / 'metadata.db'}\n")
    assert cli.main(argv) == 0, capsys.readouterr().err
    config = cfg.load(str(settings), data_root=data, pipeline_root=root, serving_dir=serving)
    result = local_runner.latest_results(config)
    assert {n.state for n in result.nodes.values()} == {"COMPLETE"}
    for node in result.nodes.values():
        for artifacts in node.outputs.values():
            assert all(artifact.uri.startswith(root + "/") for artifact in artifacts)
    examples = result.uri(ids.EXAMPLE_GEN, "examples")
    model = result.uri(ids.TRAINER, "model")
    assert examples.startswith(root) and model.startswith(root)
    manifest.verify(examples)
    manifest.verify(model)
    assert fileio.exists(f"{model}/Format-Serving/saved_model.pb")
    # The Pusher published a whole version: its marker, and the SavedModel beside it.
    versions = [name for name in fileio.list_dir(serving) if name.isdigit()]
    assert len(versions) == 1
    pushed = f"{serving}/{versions[0]}"
    # ... named to model servers only once whole (docs/serving-folder.md).
    config = fileio.read_bytes(f"{serving}/models.config").decode()
    assert f"versions: {versions[0]}" in config and f'base_path: "{serving}"' in config
    assert served_models.find(serving, checksums=True).model.path == pushed
    assert fileio.read_bytes(f"{pushed}/PUSH_COMPLETE").decode() == f"{model}/Format-Serving"
    assert fileio.exists(f"{pushed}/saved_model.pb")
    assert not [n for n in fileio.list_files(serving) if ".push-" in n]
