"""The project image for the container tier: which one, and whether an engine runs it.

The image is IMGPIPE_TEST_IMAGE, by default what `make image` tags locally. No Docker
engine skips the tier loudly; an engine without the image fails it, naming the build.
"""

from __future__ import annotations

import os

import pytest

IMAGE_ENV = "IMGPIPE_TEST_IMAGE"
DEFAULT_IMAGE = "tfx-image-pipeline:dev"


@pytest.fixture(scope="session")
def project_image() -> str:
    """The image reference the container tests compile into the package."""
    import docker

    from imgpipe.pipelines.cli.errors import UserError
    from imgpipe.pipelines.kubeflow.local_docker import docker_client

    image = os.environ.get(IMAGE_ENV, DEFAULT_IMAGE)
    try:
        client = docker_client()
    except UserError as e:
        pytest.skip(f"CONTAINER TIER SKIPPED, NO DOCKER ENGINE: {e}")
    try:
        client.images.get(image)
    except docker.errors.ImageNotFound:
        pytest.fail(
            f"the Docker engine has no image {image}: build it with `make image`, or set "
            f"{IMAGE_ENV} to an image of this checkout"
        )
    finally:
        client.close()
    return image
