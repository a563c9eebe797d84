"""The container tier's access to Docker and to the built production image.

The tests run inside bin/in-env, which binds the host's Docker socket
(/run/docker.sock) into the environment; they talk to the engine through the `docker`
package (the lock's). The image is built on the host by `make image` (bin/build-image;
make test starts the build in the background, and the tests that need no image run
meanwhile): the tier finds it by the checkout's content tag, or by the reference in
IMGPIPE_TEST_IMAGE, waiting first for a build of it that is still running.

    client = containers.docker_client()        # None (and why) without an engine
    image = containers.runtime_image()         # the reference; fails when not built
    code, output = containers.run(image, ["--help"])
"""

from __future__ import annotations

import fcntl
import os
import time
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
# How long the tier waits for a build still running (make test's, in the background):
# measured here, 6 min 11 s with the bases cached (quiet), 8 min 10 s all cold, and
# 22 min for a first build at load average 15 to 21 (docs/image.md).
BUILD_WAIT_S = 2400
_BUILD_POLL_S = 2


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
    """The CPU image built from this checkout (or IMGPIPE_TEST_IMAGE's), once a build of
    it still running has ended; fails, naming the fix, when Docker does not hold it."""
    import docker

    reference = os.environ.get(IMAGE_ENV) or images.RUNTIME_IMAGE
    waited = "" if os.environ.get(IMAGE_ENV) else wait_for_a_running_build("cpu")
    client = docker_client()
    try:
        client.images.get(reference)
    except docker.errors.ImageNotFound:
        pytest.fail(
            f"the image {reference} is not built{waited}: run 'make image' (make test builds "
            f"it), or name a built one in {IMAGE_ENV}",
            pytrace=False,
        )
    finally:
        client.close()
    return reference


def wait_for_a_running_build(variant: str, root: str | None = None) -> str:
    """Waits until no build of `variant` in the checkout at `root` (this one by default)
    holds its lock (bin/build-image); returns what a failure should add: the end of a
    background build's log, when there is one."""
    root = root or images.checkout_root()
    if root is None:
        return ""
    lock = os.path.join(root, images.build_lock_file(variant))
    if not os.path.exists(lock):
        return ""
    deadline = time.monotonic() + BUILD_WAIT_S
    fd = os.open(lock, os.O_RDONLY)
    try:
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    pytest.fail(
                        f"the image build holding {lock} is still running after "
                        f"{BUILD_WAIT_S} s (log: {images.background_log_file(variant)})",
                        pytrace=False,
                    )
                time.sleep(_BUILD_POLL_S)
    finally:
        os.close(fd)  # releases the shared lock taken, if any
    log = os.path.join(root, images.background_log_file(variant))
    if not os.path.exists(log):
        return ""
    with open(log, errors="replace") as f:
        lines = [line.strip() for line in f if line.strip()]
    return f" (the build in the background ended: {lines[-1] if lines else 'no output'})"


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
