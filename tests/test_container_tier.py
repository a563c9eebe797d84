"""Without a Docker engine the container tier is skipped, loudly: never a silent pass."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

from tests import waiting

pytestmark = pytest.mark.unit

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.mark.parametrize("workers", [[], ["-n", "1"]], ids=["serial", "xdist"])
def test_without_an_engine_the_container_tier_is_skipped_loudly(tmp_path, workers):
    env = {**os.environ, "DOCKER_HOST": f"unix://{tmp_path}/no-engine.sock"}
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "tests/test_image.py", "-q", "-p", "no:cacheprovider"]
        + workers,
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=waiting.COMMAND_S,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    summary = result.stdout.splitlines()
    banner = [
        re.search(
            r"(\d+) container-tier tests SKIPPED: NO DOCKER ENGINE .*make docker-engine", line
        )
        for line in summary
        if line.startswith("!")
    ]
    assert len(banner) == 1 and banner[0], summary
    skipped = int(banner[0].group(1))
    assert skipped >= 6
    # pytest groups the skips by where they were raised: together, every test of the tier.
    counted = [
        int(re.match(r"SKIPPED \[(\d+)\]", line).group(1))  # type: ignore[union-attr]
        for line in summary
        if line.startswith("SKIPPED [") and "make docker-engine" in line
    ]
    assert sum(counted) == skipped, summary
    assert "passed" not in summary[-1]
    if not workers:  # xdist's workers collect, and their stderr is not shown
        assert f"warning: {skipped} container-tier tests SKIPPED: NO DOCKER ENGINE" in result.stderr
