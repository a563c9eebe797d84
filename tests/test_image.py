"""The built production image (make image) under Docker: what every compiled step runs."""

from __future__ import annotations

import json

import pytest

from imgpipe.pipelines import images
from tests import containers

pytestmark = pytest.mark.container

COMPILERS = ("cc", "gcc", "g++", "c++")

# The environment's development tools, and DALI, which only the GPU image carries.
DEV_ONLY = ("pytest", "ruff", "mypy", "moto", "gcp_storage_emulator", "nvidia")
# One container answers the questions that need Python inside the image.
FACTS = (
    f"compilers = {COMPILERS!r}\nDEV_ONLY = {DEV_ONLY!r}\n"
    + """
import importlib.util, json, os, shutil
import imgpipe.pipelines.container.entrypoint
from imgpipe.components.image_statistics import strict_jpeg
from imgpipe.pipelines import images
print(json.dumps({
    "uid": os.getuid(), "gid": os.getgid(),
    "tag": images.TAG, "runtime_image": images.RUNTIME_IMAGE, "gpu_image": images.GPU_IMAGE,
    "checkout": images.checkout_root(),
    "strict_jpeg": strict_jpeg.library() is not None,
    "compilers": [c for c in compilers if shutil.which(c) or os.path.exists("/usr/bin/" + c)],
    "dev_tools": [m for m in DEV_ONLY if importlib.util.find_spec(m) is not None],
}))
"""
)


@pytest.fixture(scope="module")
def image() -> str:
    return containers.runtime_image()


@pytest.fixture(scope="module")
def facts(image) -> dict:
    code, output = containers.run(image, ["-c", FACTS], entrypoint=["python"])
    assert code == 0, output
    return json.loads(output.strip().splitlines()[-1])


def test_the_baked_tag_is_the_tag_computed_from_the_checkout(image, facts):
    assert facts["checkout"] is None  # an installed package: the tag is the baked one
    assert facts["tag"] == images.TAG
    assert (facts["runtime_image"], facts["gpu_image"]) == (images.RUNTIME_IMAGE, images.GPU_IMAGE)
    labels = containers.docker_client().images.get(image).labels
    assert labels["org.opencontainers.image.version"] == images.TAG
    assert labels["org.opencontainers.image.base.name"]  # which base: registry's or Debian's


def test_the_runtime_has_no_compilers(facts):
    assert facts["compilers"] == []


def test_the_image_holds_what_the_package_runs_on_not_the_development_tools(facts):
    assert facts["dev_tools"] == []  # bin/runtime-lock: the lock's runtime share only


def test_it_runs_as_the_runtime_user(image, facts):
    assert (facts["uid"], facts["gid"]) == (images.RUNTIME_UID, images.RUNTIME_GID)
    config = containers.docker_client().images.get(image).attrs["Config"]
    assert config["User"] == f"{images.RUNTIME_UID}:{images.RUNTIME_GID}"


def test_the_entrypoint_module_imports_and_the_strict_jpeg_library_loads(facts):
    assert facts["strict_jpeg"] is True


def test_pip_check_passes(image):
    code, output = containers.run(image, ["check"], entrypoint=["pip"])
    assert code == 0, output
    assert "No broken requirements found" in output


def test_the_default_command_is_the_cli_help(image):
    code, output = containers.run(image, [])
    assert code == 0, output
    assert "usage: imgpipe" in output


@pytest.mark.parametrize("signal_name, code", [("SIGTERM", 143), ("SIGINT", 130)])
def test_a_signal_to_the_containers_pid_1_stops_the_work_and_publishes_nothing(
    image, tmp_path, signal_name, code
):
    """In a pod the step is PID 1, which ignores a signal it has no handler for: the CLI
    converts SIGTERM (the kubelet's) and SIGINT into a clean stop, exit 128+n, and the
    output holds no manifest that a reader would accept."""
    import os
    import time

    from imgpipe.components.common.formats import layout
    from tests import imagegen

    src, out = tmp_path / "src", tmp_path / "out"
    imagegen.make_image_folder(str(src), {"a": 600, "b": 600}, size=(160, 160))
    os.chmod(tmp_path, 0o777)
    client = containers.docker_client()
    container = client.containers.create(
        image,
        ["convert", "/data/src", "/data/out", "--resize", "96", "--verify", "decode"],
        network_mode="none",
        volumes={str(tmp_path): {"bind": "/data", "mode": "rw"}},
    )
    try:
        container.start()
        deadline = time.monotonic() + 300
        while not out.exists() and time.monotonic() < deadline:  # the conversion has begun
            time.sleep(0.2)
        assert out.exists(), container.logs().decode(errors="replace")
        container.kill(signal=signal_name)
        status = container.wait(timeout=120)["StatusCode"]
        logs = container.logs().decode(errors="replace")
    finally:
        container.remove(force=True)
        client.close()
    assert status == code, logs
    assert f"stopped by {signal_name}" in logs
    assert not (out / layout.MANIFEST_FILE).exists()
