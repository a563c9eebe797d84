"""The Flink image of the container tier: what goes in it and the tags it is cached under.

`make flink-image` (bin/flink-image) builds it without an image registry: a Debian 13
base with Debian's Java runtime (debootstrap, then `docker import`), and on it
flink-image/Dockerfile (beside this file) with Flink's module jars and Beam's Flink job
server from the artifact cache (`make engines-fetch`) and the configuration below. Both images are
tagged by a hash of everything they are made from, so a build is skipped when its
image exists and redone when any of it changes. docs/flink-containers.md.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import sys
from pathlib import Path

from imgpipe.pipelines.engines import artifacts, flink

REPO_ROOT = Path(__file__).resolve().parents[1]
DOCKER_DIR = REPO_ROOT / "tests" / "flink-image"
# The base: bump BASE_RECIPE_VERSION when bin/flink-image's base steps change.
BASE_RECIPE_VERSION = 1
BASE_SUITE = "trixie"
BASE_PACKAGES = ("openjdk-21-jre-headless",)
BASE_NAME = "imgpipe-flink-base"
IMAGE_NAME = "imgpipe-flink"
HASH_LENGTH = 16

# Fixed ports inside the cluster's network (Flink's images use the same).
REST_PORT = 8081
RPC_PORT = 6123
BLOB_PORT = 6124
TASKMANAGER_RPC_PORT = 6122
TASKMANAGER_DATA_PORT = 6121
# The network names of the JobManager; a TaskManager's is TASKMANAGER_PREFIX + number.
JOBMANAGER_HOST = "jobmanager"
TASKMANAGER_PREFIX = "taskmanager-"

# A TaskManager lost mid-job (its container killed) fails the job's tasks; Flink then
# restarts the job on the slots left, after the delay, up to this many times. Without a
# restart strategy (Flink's default when checkpointing is off, as in Beam's batch jobs)
# the job fails at the first loss. The attempts cover those spent before the JobManager
# notices the TaskManager is gone and stops offering its slots (heartbeats below).
RESTART_ATTEMPTS = 10
RESTART_DELAY = "5 s"
RESTART_STRATEGY = {
    "restart-strategy.type": "fixed-delay",
    "restart-strategy.fixed-delay.attempts": RESTART_ATTEMPTS,
    "restart-strategy.fixed-delay.delay": RESTART_DELAY,
    # A lost TaskManager is declared dead after this long without heartbeats (Flink's
    # default is 50 s, each second of which holds the job's restart back).
    "heartbeat.interval": 2000,
    "heartbeat.timeout": 10000,
    # A job asks for as many slots as its parallelism; spread over the TaskManagers, each
    # holds a share of every job, as on a cluster of several pods.
    "cluster.evenly-spread-out-slots": "true",
}

_LOG4J_CONSOLE = """\
rootLogger.level = INFO
rootLogger.appenderRef.console.ref = ConsoleAppender
appender.console.name = ConsoleAppender
appender.console.type = CONSOLE
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = %d{yyyy-MM-dd HH:mm:ss,SSS} %-5p %-60c %x - %m%n
"""


def config_yaml() -> str:
    """The image's conf/config.yaml: what every role shares. A TaskManager adds its own
    host name and resource id (taskmanager_properties)."""
    settings = {
        "jobmanager.rpc.address": JOBMANAGER_HOST,
        "jobmanager.rpc.port": RPC_PORT,
        "jobmanager.bind-host": "0.0.0.0",
        "jobmanager.memory.process.size": flink.JOBMANAGER_PROCESS_SIZE,
        "rest.address": JOBMANAGER_HOST,
        "rest.bind-address": "0.0.0.0",
        "rest.port": REST_PORT,
        "blob.server.port": BLOB_PORT,
        "taskmanager.bind-host": "0.0.0.0",
        "taskmanager.rpc.port": TASKMANAGER_RPC_PORT,
        "taskmanager.data.port": TASKMANAGER_DATA_PORT,
        "taskmanager.numberOfTaskSlots": flink.SLOTS,
        "taskmanager.memory.process.size": flink.TASKMANAGER_PROCESS_SIZE,
        **flink.TASKMANAGER_MEMORY,
        "parallelism.default": flink.SLOTS,
        **RESTART_STRATEGY,
        "io.tmp.dirs": "/tmp",
    }
    return "".join(f"{key}: {value}\n" for key, value in settings.items())


def taskmanager_properties(number: int) -> str:
    """FLINK_PROPERTIES of TaskManager `number`: the name the others reach it by."""
    name = f"{TASKMANAGER_PREFIX}{number}"
    return f"taskmanager.host: {name}\ntaskmanager.resource-id: {name}\n"


def _conf_files() -> dict[str, str]:
    return {
        "config.yaml": config_yaml(),
        "log4j-console.properties": _LOG4J_CONSOLE,
        "java-options": " ".join(flink.JAVA_MODULE_OPTIONS) + "\n",
    }


def base_tag() -> str:
    recipe = f"{BASE_RECIPE_VERSION} {BASE_SUITE} {','.join(BASE_PACKAGES)}"
    return f"{BASE_NAME}:{hashlib.sha256(recipe.encode()).hexdigest()[:HASH_LENGTH]}"


def image_tag() -> str:
    """The Flink image's tag: a hash of its base, Dockerfile, entrypoint, configuration
    and the names (versions) of the jars.

    Raises:
      MissingArtifact: the jars are not fetched.
    """
    digest = hashlib.sha256(base_tag().encode())
    for name in ("Dockerfile", "docker-entrypoint.sh"):
        digest.update((DOCKER_DIR / name).read_bytes())
    for name, text in sorted(_conf_files().items()):
        digest.update(f"{name}\0{text}\0".encode())
    for lib in (flink.flink_lib(), flink.job_server_lib()):
        digest.update("\0".join(sorted(os.listdir(lib))).encode())
    return f"{IMAGE_NAME}:{digest.hexdigest()[:HASH_LENGTH]}"


def write_context(context: str) -> None:
    """Fills the folder `context` with tests/flink-image/Dockerfile's build context."""
    os.makedirs(os.path.join(context, "conf"), exist_ok=True)
    for name in ("Dockerfile", "docker-entrypoint.sh"):
        shutil.copy2(DOCKER_DIR / name, os.path.join(context, name))
    for name, text in _conf_files().items():
        with open(os.path.join(context, "conf", name), "w") as f:
            f.write(text)
    for lib, target in (
        (flink.flink_lib(), "flink-lib"),
        (flink.job_server_lib(), "job-server-lib"),
    ):
        shutil.copytree(lib, os.path.join(context, target), dirs_exist_ok=True)


def _main(argv: list[str]) -> None:
    if argv[:1] == ["context"] and len(argv) == 2:
        write_context(argv[1])
    else:
        # For bin/flink-image, as shell words.
        print(f"BASE_TAG={base_tag()}")
        print(f"BASE_SUITE={BASE_SUITE}")
        print(f"BASE_PACKAGES={','.join(BASE_PACKAGES)}")
        print(f"IMAGE_TAG={image_tag()}")


if __name__ == "__main__":
    try:
        _main(sys.argv[1:])
    except artifacts.MissingArtifact as error:
        sys.exit(f"imgpipe: error: {error}")
