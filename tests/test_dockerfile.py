"""The Dockerfile installs the environment's pins and builds a small, non-root image.

No Docker engine exists on the build machines, so these tests read the Dockerfile;
`make image` builds it where an engine exists.
"""

from __future__ import annotations

import os
import re
import subprocess

import pytest

from imgpipe.pipelines import images

pytestmark = pytest.mark.unit

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def read(name: str) -> str:
    with open(os.path.join(ROOT, name)) as f:
        return f.read()


def instructions(text: str) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) with continuation lines joined and comments dropped."""
    joined = re.sub(
        r"\\\n",
        " ",
        "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("#")),
    )
    result = []
    for line in joined.splitlines():
        if line.strip():
            keyword, _, rest = line.strip().partition(" ")
            result.append((keyword.upper(), " ".join(rest.split())))
    return result


def stages(text: str) -> list[list[tuple[str, str]]]:
    result: list[list[tuple[str, str]]] = []
    for keyword, rest in instructions(text):
        if keyword == "FROM":
            result.append([])
        result[-1].append((keyword, rest))
    return result


DOCKERFILE = read("Dockerfile")
BUILD, RUNTIME = stages(DOCKERFILE)


def test_debian_13_and_python_3_13_in_both_stages():
    for stage in (BUILD, RUNTIME):
        base = stage[0][1].split()[0]
        assert re.fullmatch(r"python:3\.13(-slim)?-trixie", base), base


def test_installs_the_environments_lock_file():
    copies = [rest for keyword, rest in BUILD if keyword == "COPY"]
    assert "requirements.lock /tmp/requirements.lock" in copies
    runs = " ".join(rest for keyword, rest in BUILD if keyword == "RUN")
    assert "pip install --require-virtualenv -r /tmp/requirements.lock" in runs
    # TensorFlow's CUDA extra is resolved against the lock, at the lock's version.
    assert "-c /tmp/requirements.lock" in runs
    assert "tensorflow[and-cuda]==${TF_VERSION}" in runs
    lock = read("requirements.lock")
    assert re.search(r"^tensorflow==2\.21\.0$", lock, re.M)
    # The lock is the environment's: bin/env-common.sh keys the venv by its hash.
    assert 'LOCK_FILE="$REPO_ROOT/requirements.lock"' in read("bin/env-common.sh")


def test_the_tensorflow_version_expression_reads_the_lock():
    # Run the Dockerfile's own sed expression on the real lock file.
    run = next(rest for keyword, rest in BUILD if keyword == "RUN" and "TF_VERSION" in rest)
    expression = re.search(r"sed -n '([^']+)'", run).group(1)
    version = subprocess.run(
        ["sed", "-n", expression, os.path.join(ROOT, "requirements.lock")],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    assert version == "2.21.0"


def test_the_package_is_installed_without_re_resolving():
    runs = " ".join(rest for keyword, rest in BUILD if keyword == "RUN")
    assert "pip install --require-virtualenv --no-deps /src" in runs


def test_runtime_stage_is_small_and_non_root():
    keywords = [keyword for keyword, _ in RUNTIME]
    runs = " ".join(rest for keyword, rest in RUNTIME if keyword == "RUN")
    assert "apt-get" not in runs and "pip install" not in runs  # build tools stay behind
    assert ("COPY", "--from=build /opt/venv /opt/venv") in RUNTIME
    users = [rest for keyword, rest in RUNTIME if keyword == "USER"]
    assert users and users[-1].split(":")[0] not in ("0", "root")
    assert keywords.index("USER") > keywords.index("COPY")


def test_dockerignore_sends_only_what_the_build_copies():
    lines = [
        line for line in read(".dockerignore").splitlines() if line and not line.startswith("#")
    ]
    assert lines[0] == "*"
    assert {"!requirements.lock", "!pyproject.toml", "!components/", "!pipelines/"} <= set(lines)


def test_the_image_tag_is_set_in_one_place():
    assert images.RUNTIME_IMAGE.endswith(":" + images.TAG)
    assert images.TAG not in DOCKERFILE
    assert "imgpipe.pipelines.images import RUNTIME_IMAGE" in read("Makefile")
