"""The built production image (make image) under Docker: what every compiled step runs."""

from __future__ import annotations

import json

import pytest

from imgpipe.pipelines import images
from tests import containers

pytestmark = pytest.mark.container

COMPILERS = ("cc", "gcc", "g++", "c++")

# One container answers the questions that need Python inside the image.
FACTS = (
    f"compilers = {COMPILERS!r}\n"
    + """
import json, os, shutil
import imgpipe.pipelines.container.entrypoint
from imgpipe.components.image_statistics import strict_jpeg
from imgpipe.pipelines import images
print(json.dumps({
    "uid": os.getuid(), "gid": os.getgid(),
    "tag": images.TAG, "runtime_image": images.RUNTIME_IMAGE, "gpu_image": images.GPU_IMAGE,
    "checkout": images.checkout_root(),
    "strict_jpeg": strict_jpeg.library() is not None,
    "compilers": [c for c in compilers if shutil.which(c) or os.path.exists("/usr/bin/" + c)],
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
