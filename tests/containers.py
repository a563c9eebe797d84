"""The container tier's access to Docker and to the built production image.

The tests run inside bin/in-env, which binds the host's Docker socket
(/run/docker.sock) into the environment; they talk to the engine through the `docker`
package (the lock's). The image is built on the host by `make image` (make test builds
it first, bin/build-image): the tier finds it by the checkout's content tag, or by the
reference in IMGPIPE_TEST_IMAGE.

    client = containers.docker_client()        # None (and why) without an engine
    image = containers.runtime_image()         # the reference; fails when not built
    code, output = containers.run(image, ["--help"])
"""

from __future__ import annotations

import os
from typing import Any

import pytest

from imgpipe.pipelines import images

IMAGE_ENV = "IMGPIPE_TEST_IMAGE"
# The engine's answer to a ping, which decides whether the tier runs or is skipped
# (loudly): measured busy, the heaviest docker command (`run --detach`) under 4 s.
ENGINE_TIMEOUT_S = 60
# One call to the engine (the client's timeout), and the run of one container of the
# tier's checks (the image's facts, `pip check`, an import probe): measured busy, under
# 4 s for a call and 1-34 s for a check.
RUN_TIMEOUT_S = 300


def engine_problem() -> str | None:
    """None when a Docker engine answers, else why none does."""
    try:
        import docker

        client = docker.from_env(timeout=ENGINE_TIMEOUT_S)
        client.ping()
        client.close()
    except Exception as e:  # noqa: BLE001 - every way of not answering is the same answer
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        return f"{type(e).__name__}: {first}"
    return None


def docker_client() -> Any:
    """A client of the engine; the caller closes it."""
    import docker

    return docker.from_env(timeout=RUN_TIMEOUT_S)


def runtime_image() -> str:
    """The CPU image built from this checkout (or IMGPIPE_TEST_IMAGE's); fails, naming
    the fix, when Docker does not hold it."""
    import docker

    reference = os.environ.get(IMAGE_ENV) or images.RUNTIME_IMAGE
    client = docker_client()
    try:
        client.images.get(reference)
    except docker.errors.ImageNotFound:
        pytest.fail(
            f"the image {reference} is not built: run 'make image' (make test builds it), "
            f"or name a built one in {IMAGE_ENV}",
            pytrace=False,
        )
    finally:
        client.close()
    return reference


def run(
    image: str, command: list[str], entrypoint: list[str] | None = None, **kwargs: Any
) -> tuple[int, str]:
    """(exit code, stdout and stderr) of a container of `image` running `command`; the
    container is removed. No network: these checks need none."""
    client = docker_client()
    container = client.containers.create(
        image, command, entrypoint=entrypoint, network_mode="none", **kwargs
    )
    try:
        container.start()
        code = container.wait(timeout=RUN_TIMEOUT_S)["StatusCode"]
        return code, container.logs().decode(errors="replace")
    finally:
        container.remove(force=True)
        client.close()
