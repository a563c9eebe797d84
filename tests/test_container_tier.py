"""Without a Docker engine the container tier is skipped, loudly: never a silent pass."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

pytestmark = pytest.mark.unit

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_without_an_engine_the_container_tier_is_skipped_loudly(tmp_path):
    env = {**os.environ, "DOCKER_HOST": f"unix://{tmp_path}/no-engine.sock"}
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "tests/test_image.py", "-q", "-p", "no:cacheprovider"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    warned = re.search(
        r"imgpipe tests: warning: (\d+) container-tier tests SKIPPED: NO DOCKER ENGINE",
        result.stderr,
    )
    assert warned and int(warned.group(1)) >= 6, result.stderr
    summary = result.stdout.splitlines()
    assert any(line.startswith("!") and "SKIPPED: NO DOCKER ENGINE" in line for line in summary)
    # pytest groups the skips by where they were raised: together, every test of the tier.
    counted = [
        int(re.match(r"SKIPPED \[(\d+)\]", line).group(1))  # type: ignore[union-attr]
        for line in summary
        if line.startswith("SKIPPED [") and "make docker-engine" in line
    ]
    assert sum(counted) == int(warned.group(1)), summary
    assert "passed" not in summary[-1]
