"""A supervisor's SIGTERM or SIGINT, sent to the one process id it knows, that of
`bin/imgpipe convert ...` entered from outside the environment, stops the conversion
as Ctrl-C does: exit 128 + n, nothing published, no process left behind.

The tests already run inside bin/in-env's chroot, so each builds that chroot again (as
tests/test_in_env.py does): the environment's root, bound at a rootfs path of a cache
of its own, is what bin/in-env enters. The conversion stops itself with SIGSTOP once
it is writing (IMGPIPE_STOP_AT=writing:STOP), so the signal arrives at a known point.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess

import pytest

from imgpipe.components.common.formats import layout
from imgpipe.components.common.runtime import phases
from tests import imagegen, procfs, stopping, waiting
from tests.test_in_env import REPO

pytestmark = [
    pytest.mark.component,
    pytest.mark.skipif(
        os.geteuid() != 0, reason="chroot and mount need root, as bin/in-env's rootfs mode does"
    ),
]

# $1: the environment cache to make. Every step execs the next, as bin/in-env's do, so
# the process the test starts ends as the conversion itself, or not at all.
ENTER_FROM_OUTSIDE = r"""
set -eu
mount --make-rprivate / 2>/dev/null || true
mount --rbind / /mnt
exec chroot /mnt /bin/bash -c '
  set -eu
  cache="$1"; shift
  rootfs="$cache/rootfs-trixie-v1"
  mkdir -p "$rootfs"
  mount --bind / "$rootfs"
  exec env -u IMGPIPE_IN_ENV IMGPIPE_ENV_MODE=rootfs IMGPIPE_ENV_CACHE="$cache" "$@"
' enter "$@"
"""


def state(pid: int) -> str | None:
    fields = procfs.stat(pid)
    return fields[0] if fields else None


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=["TERM", "INT"])
def test_a_signal_to_the_outer_pid_stops_the_conversion_like_ctrl_c(tmp_path, signum):
    images, out = str(tmp_path / "images"), str(tmp_path / "out")
    imagegen.make_image_folder(images, {"cat": 6, "dog": 6}, size=(16, 16))
    command = [os.path.join(REPO, "bin", "imgpipe"), "convert", images, out, "--no-progress"]
    run = subprocess.Popen(
        ["unshare", "--mount", "--propagation", "unchanged", "bash", "-c", ENTER_FROM_OUTSIDE]
        + ["enter", str(tmp_path / "cache"), *command],
        env={**os.environ, phases.STOP_AT_ENV: f"{phases.WRITING}:STOP"},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        waiting.until(lambda: state(run.pid) in ("T", None), "writing, or ended", waiting.JOB_S)
        assert state(run.pid) == "T", "the conversion ended before it was writing"
        stopped_tree = procfs.descendants(run.pid)
        os.kill(run.pid, signum)
        os.kill(run.pid, signal.SIGCONT)
        _, stderr = run.communicate(timeout=stopping.GIVE_UP_S)
    finally:
        left = [pid for pid in pids_with(out) if pid != os.getpid()]
        for pid in {*left, *([run.pid] if run.poll() is None else [])}:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        run.wait()

    assert run.returncode == 128 + signum, stderr[-3000:]
    assert f"stopped by {signal.Signals(signum).name}" in stderr
    assert not os.path.exists(os.path.join(out, layout.MANIFEST_FILE))
    assert procfs.living(stopped_tree) == []
    assert left == []


def pids_with(text: str) -> list[int]:
    """The living processes whose command line mentions `text`."""
    found = []
    for entry in os.listdir("/proc"):
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                if text.encode() in f.read():
                    found.append(int(entry))
        except (OSError, ValueError):
            continue
    return procfs.living(found)
