"""The artifact cache: jars and other non-Python artifacts, one <name>-<version> folder each.

`bin/fetch-engines` (`make engines-fetch`) fills it with the ordinary clients (mvn,
apt-get); `bin/in-env` says where it is (IMGPIPE_ARTIFACTS). A folder is complete when its
`.complete` marker exists, which the fetch writes last.
"""

from __future__ import annotations

import os
import shutil

ARTIFACTS_ENV = "IMGPIPE_ARTIFACTS"
COMPLETE_MARKER = ".complete"
FETCH_COMMAND = "make engines-fetch"


class MissingArtifact(FileNotFoundError):
    """An artifact the command needs is not in the cache; the message says how to fetch it."""


def artifact_root() -> str:
    root = os.environ.get(ARTIFACTS_ENV)
    if not root:
        raise MissingArtifact(
            f"{ARTIFACTS_ENV} is not set: run the command through bin/in-env, which sets it"
        )
    return root


def artifact_dir(name: str, version: str, what: str) -> str:
    """The complete cache folder <name>-<version>.

    Args:
      name, version: the folder's name is f"{name}-{version}".
      what: what the folder holds, for the error (e.g. "the Flink 2.2.0 cluster jars").

    Raises:
      MissingArtifact: the folder is missing or incomplete.
    """
    path = os.path.join(artifact_root(), f"{name}-{version}")
    if not os.path.exists(os.path.join(path, COMPLETE_MARKER)):
        raise MissingArtifact(f"{what} are not in {path}: fetch them with '{FETCH_COMMAND}'")
    return path


def java() -> str:
    """The `java` on PATH.

    Raises:
      MissingArtifact: no Java runtime is installed.
    """
    found = shutil.which("java")
    if found is None:
        raise MissingArtifact(f"no Java runtime on PATH: install one with '{FETCH_COMMAND}'")
    return found


def maven_pom(coordinates: tuple[str, ...]) -> str:
    """A Maven project whose runtime dependencies are a classpath."""
    dependencies = "".join(
        "<dependency><groupId>{}</groupId><artifactId>{}</artifactId>"
        "<version>{}</version></dependency>\n".format(*gav.split(":"))
        for gav in coordinates
    )
    return (
        '<project xmlns="http://maven.apache.org/POM/4.0.0">\n'
        "<modelVersion>4.0.0</modelVersion>\n"
        "<groupId>imgpipe</groupId><artifactId>engine-classpath</artifactId>"
        "<version>1</version>\n"
        f"<dependencies>\n{dependencies}</dependencies>\n</project>\n"
    )
