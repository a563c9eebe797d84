"""The image's content tag (imgpipe.pipelines.images) and bin/build-image's errors."""

from __future__ import annotations

import contextlib
import importlib.machinery
import importlib.util
import os
import re
import shutil
import subprocess
import sys

import pytest

from imgpipe.pipelines import images
from tests import waiting

pytestmark = pytest.mark.unit

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BUILD_IMAGE = os.path.join(ROOT, "bin", "build-image")


@pytest.fixture
def checkout(tmp_path):
    """A copy of the image's inputs, as another clone of the same commit has them."""
    for relative in images.image_input_files(ROOT):
        target = tmp_path / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(os.path.join(ROOT, relative), target)
    return tmp_path


def test_the_tag_is_the_version_and_a_hash_of_the_content():
    version = re.search(
        r'^version = "(.+)"', open(os.path.join(ROOT, "pyproject.toml")).read(), re.M
    )
    assert re.fullmatch(re.escape(version.group(1)) + r"-[0-9a-f]{12}", images.TAG)
    assert images.RUNTIME_IMAGE == f"{images.REGISTRY}/{images.IMAGE_NAME}:{images.TAG}"
    assert images.GPU_IMAGE == f"{images.REGISTRY}/{images.IMAGE_NAME}:{images.TAG}-gpu"
    assert images.image_tag("gpu") == images.TAG + "-gpu"
    with pytest.raises(ValueError, match="cpu"):
        images.image_tag("tpu")


def test_another_checkout_of_the_same_files_has_the_same_tag(checkout):
    # Content only: another place, other times and modes, the same tag.
    os.utime(checkout / "Dockerfile", (0, 0))
    os.chmod(checkout / "pyproject.toml", 0o600)
    assert images.content_tag(str(checkout)) == images.TAG


@pytest.mark.parametrize(
    "edit",
    [
        "pipelines/images.py",
        "components/image_statistics/strict_jpeg.c",
        "requirements.lock",
        "Dockerfile",
        "bin/image-base.recipe",
    ],
)
def test_the_tag_changes_when_an_input_changes(checkout, edit):
    with open(checkout / edit, "a") as f:
        f.write("\n# edited\n")
    assert images.content_tag(str(checkout)) != images.TAG


def test_a_new_source_file_changes_the_tag(checkout):
    (checkout / "components" / "common" / "new_module.py").write_text("X = 1\n")
    assert images.content_tag(str(checkout)) != images.TAG


def test_ignored_files_do_not_change_the_tag(checkout):
    (checkout / "pipelines" / "__pycache__").mkdir(exist_ok=True)
    (checkout / "pipelines" / "__pycache__" / "images.cpython-313.pyc").write_bytes(b"\0")
    (checkout / "components" / "stray.pyc").write_bytes(b"\0")
    (checkout / "components" / "image_statistics" / "libimgpipe_strict_jpeg.so").write_bytes(b"")
    (checkout / "pipelines" / images.BAKED_MODULE).write_text('TAG = "0.0.0-000000000000"\n')
    (checkout / "pipelines" / "build").mkdir()
    (checkout / "pipelines" / "build" / "x.py").write_text("")
    (checkout / "README.md").write_text("documentation is not an input\n")
    (checkout / "tests").mkdir()
    (checkout / "tests" / "test_x.py").write_text("")
    assert images.content_tag(str(checkout)) == images.TAG


def test_a_missing_input_is_named(checkout):
    os.remove(checkout / "bin" / "image-base.recipe")
    with pytest.raises(FileNotFoundError, match="base.recipe"):
        images.content_tag(str(checkout))


def build_image(*args: str, path: str | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, "PATH": path if path is not None else os.environ["PATH"]}
    return subprocess.run(
        [sys.executable, BUILD_IMAGE, *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=waiting.COMMAND_S,
    )


def test_build_image_prints_the_reference_it_builds():
    assert build_image("--print").stdout == images.RUNTIME_IMAGE + "\n"
    assert build_image("--print", "--variant", "gpu").stdout == images.GPU_IMAGE + "\n"


def test_without_a_docker_engine_the_error_is_one_line_naming_the_fix(tmp_path):
    # A PATH with bash and the core tools but no docker command.
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in ("bash", "sha256sum", "cut", "awk"):
        found = shutil.which(tool)
        if found:
            os.symlink(found, bin_dir / tool)
    failed = build_image(path=str(bin_dir))
    assert failed.returncode == 1
    assert failed.stderr.count("\n") == 1
    assert failed.stderr.startswith("imgpipe: error: no Docker engine answers (no docker command)")
    assert "make docker-engine" in failed.stderr
    # make test's mode: a loud warning, exit 0, nothing built.
    tolerated = build_image("--if-engine", path=str(bin_dir))
    assert tolerated.returncode == 0 and tolerated.stdout == ""
    assert "NOT BUILDING THE IMAGE" in tolerated.stderr and "skipped" in tolerated.stderr


def load_build_image():
    loader = importlib.machinery.SourceFileLoader("build_image", BUILD_IMAGE)
    spec = importlib.util.spec_from_loader("build_image", loader)
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


def test_a_failing_step_is_one_line_naming_the_step_and_its_log(tmp_path, monkeypatch):
    build_image_module = load_build_image()
    monkeypatch.setattr(build_image_module, "LOG_DIR", str(tmp_path))
    with pytest.raises(build_image_module.StepFailed) as failed:
        build_image_module.run_step(
            "install the lock",
            "install.log",
            [
                "sh",
                "-c",
                "echo Collecting x; echo 'ERROR: THESE PACKAGES DO NOT MATCH THE HASHES'; exit 1",
            ],
        )
    message = str(failed.value)
    assert "\n" not in message
    assert message == (
        "image build step 'install the lock' failed: ERROR: THESE PACKAGES DO NOT MATCH THE "
        f"HASHES (log: {tmp_path / 'install.log'})"
    )
    assert "Collecting x" in (tmp_path / "install.log").read_text()


def test_an_unknown_base_mode_is_named():
    env = {**os.environ, "IMGPIPE_IMAGE_BASE": "ubuntu"}
    failed = subprocess.run(
        [sys.executable, BUILD_IMAGE, "--rebuild"], env=env, capture_output=True, text=True
    )
    assert failed.returncode == 1
    assert "IMGPIPE_IMAGE_BASE='ubuntu': use one of auto, registry, debian" in failed.stderr


def test_the_registry_probe_takes_any_answer_and_gives_up_on_none(monkeypatch):
    import socket
    import threading
    from http.server import BaseHTTPRequestHandler, HTTPServer

    class Unauthorized(BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 - a registry's /v2/ answers 401 to anonymous clients
            assert self.path == "/v2/"
            self.send_response(401)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args):
            pass

    build_image_module = load_build_image()
    server = HTTPServer(("127.0.0.1", 0), Unauthorized)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        monkeypatch.setenv("IMGPIPE_REGISTRY_URL", f"http://127.0.0.1:{server.server_port}")
        assert build_image_module.registry_answers()
    finally:
        server.shutdown()
    with socket.socket() as closed:  # a port nothing listens on
        closed.bind(("127.0.0.1", 0))
        monkeypatch.setenv("IMGPIPE_REGISTRY_URL", f"http://127.0.0.1:{closed.getsockname()[1]}")
        assert not build_image_module.registry_answers()


def test_one_build_of_a_variant_holds_its_lock_and_the_container_tier_waits_for_it(
    tmp_path, monkeypatch
):
    from tests import containers

    build_image_module = load_build_image()
    monkeypatch.setattr(build_image_module, "ROOT", str(tmp_path))
    held = build_image_module.hold_build_lock(images, "cpu", wait=False)
    assert held is not None
    # A second build (make test's, in the background) finds it held and starts nothing.
    assert build_image_module.hold_build_lock(images, "cpu", wait=False) is None
    log = tmp_path / images.background_log_file("cpu")
    log.parent.mkdir(parents=True)
    log.write_text("[build-image] build the cpu image\nimgpipe: error: image build step failed\n")
    # The tier waits while the build runs, and says how a failed one ended.
    monkeypatch.setattr(containers, "BUILD_WAIT_S", 0.5)
    with pytest.raises(pytest.fail.Exception, match=r"still running after 0.5 s \(log: build/"):
        containers.wait_for_a_running_build("cpu", str(tmp_path))
    os.close(held)  # the build ends
    ended = containers.wait_for_a_running_build("cpu", str(tmp_path))
    assert ended == " (the build in the background ended: imgpipe: error: image build step failed)"
    # The lock is per variant: a GPU build runs beside a CPU one.
    cpu = build_image_module.hold_build_lock(images, "cpu", wait=False)
    gpu = build_image_module.hold_build_lock(images, "gpu", wait=False)
    assert cpu is not None and gpu is not None
    os.close(cpu)
    os.close(gpu)


def test_a_detached_build_holds_the_lock_its_starter_took_until_it_ends(tmp_path):
    # The starter's descriptor, passed to the build it detaches, keeps the lock after
    # the starter has exited (bin/build-image --background).
    lock = tmp_path / "image-build-cpu.lock"
    holder = (
        "import fcntl, os, subprocess, sys\n"
        f"fd = os.open({str(lock)!r}, os.O_RDWR | os.O_CREAT)\n"
        "fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)\n"
        "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)'],\n"
        "    pass_fds=(fd,), start_new_session=True, stdout=subprocess.DEVNULL,\n"
        "    stderr=subprocess.DEVNULL)\n"
        "print(child.pid, flush=True)\n"
    )
    started = subprocess.run(
        [sys.executable, "-c", holder], capture_output=True, text=True, timeout=waiting.COMMAND_S
    )
    build = int(started.stdout)
    try:
        import fcntl

        fd = os.open(lock, os.O_RDONLY)
        with pytest.raises(BlockingIOError):
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        os.kill(build, 9)
        waiting.until(lambda: _shared_lock_taken(fd), "the lock released")
        os.close(fd)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(build, 9)


def _shared_lock_taken(fd: int) -> bool:
    import fcntl

    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    return True
