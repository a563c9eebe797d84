"""SIGTERM and SIGINT end an `imgpipe` command within the stop's bound at any moment
(issue: a container held SIGINT for 120 s): during its imports, as it starts writing,
anywhere in the conversion and in its exit, on a busy machine. A stopped command exits
128 + n and publishes nothing a reader accepts; one that had finished exits 0 with its
whole output. Also: a library thread that never ends, and a clean-up that hangs, do not
hold the process past the deadline."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from imgpipe.components.common.formats import layout
from imgpipe.pipelines import termination
from tests import imagegen, procfs, stopping

pytestmark = pytest.mark.component

SIGNALS = [signal.SIGTERM, signal.SIGINT]
# What the command is started with: the imgpipe command as its console script runs it.
COMMAND = [sys.executable, "-m", "imgpipe.pipelines.cli"]
GIVE_UP_S = stopping.GIVE_UP_S


@pytest.fixture(scope="module")
def photos(tmp_path_factory):
    root = tmp_path_factory.mktemp("stop-bound") / "photos"
    imagegen.make_image_folder(str(root), {"a": 300, "b": 300}, size=(128, 128))
    return str(root)


def convert(photos: str, out: str, prelude: str = "") -> subprocess.Popen:
    """`imgpipe convert` in a session of its own; `prelude` runs first in its process."""
    argv = ["convert", photos, out, "--resize", "64", "--verify", "decode", "--no-progress"]
    script = textwrap.dedent(prelude) + (
        "import sys\nsys.argv = ['imgpipe', *sys.argv[1:]]\n"
        "from imgpipe.pipelines.cli import run_command\nrun_command()\n"
    )
    return subprocess.Popen(
        [sys.executable, "-c", script, *argv],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )


def stop(run: subprocess.Popen, signum: int) -> tuple[float, str]:
    """Sends the signal; returns the seconds to the process's end and its stderr."""
    tree = procfs.descendants(run.pid)
    sent = time.monotonic()
    os.kill(run.pid, signum)
    try:
        _, stderr = run.communicate(timeout=GIVE_UP_S)
    except subprocess.TimeoutExpired:
        os.killpg(run.pid, signal.SIGKILL)
        run.communicate()
        pytest.fail(f"still running {GIVE_UP_S} s after {signal.Signals(signum).name}")
    took = time.monotonic() - sent
    assert procfs.living(tree) == [], "a process of the command was left behind"
    return took, stderr


def wait_for(path: str, run: subprocess.Popen) -> None:
    deadline = time.monotonic() + GIVE_UP_S
    while not os.path.exists(path) and run.poll() is None and time.monotonic() < deadline:
        time.sleep(0.02)


def assert_stopped_or_finished(code: int, stderr: str, out: str, signum: int) -> None:
    """Stopped: 128 + n, the line, no manifest. Finished before the signal: 0, whole."""
    published = os.path.exists(os.path.join(out, layout.MANIFEST_FILE))
    if code == 0:
        assert published, stderr[-2000:]
        return
    assert code == 128 + signum, stderr[-3000:]
    assert f"stopped by {signal.Signals(signum).name}" in stderr
    assert not published


@pytest.mark.parametrize("signum", SIGNALS, ids=["TERM", "INT"])
def test_a_stop_at_any_moment_of_a_conversion_ends_within_the_bound(photos, tmp_path, signum):
    seed = int(signum)
    took = {}
    with stopping.busy_machine():
        run = convert(photos, str(tmp_path / "early"))
        time.sleep(stopping.DURING_IMPORTS_S)
        took["imports"], stderr = stop(run, signum)
        assert run.returncode == 128 + signum, stderr[-3000:]
        assert not os.path.exists(tmp_path / "early")
        for index, moment in enumerate(stopping.moments(seed, 5)):
            out = str(tmp_path / f"out-{index}")
            run = convert(photos, out)
            wait_for(out, run)
            time.sleep(moment)
            took[moment], stderr = stop(run, signum)
            assert_stopped_or_finished(run.returncode, stderr, out, signum)
    assert max(took.values()) <= stopping.STOP_BOUND_S, took


LIBRARY_THREAD_THAT_NEVER_ENDS = """
import threading, time
threading.Thread(target=time.sleep, args=(3600,), name="a-library-thread").start()
"""


def test_a_library_thread_that_never_ends_does_not_hold_the_stop(photos, tmp_path):
    """What Beam's state sampler did when the stop landed between its start and the flag
    that says it started: a non-daemon thread nobody stops."""
    out = str(tmp_path / "out")
    run = convert(photos, out, prelude=LIBRARY_THREAD_THAT_NEVER_ENDS)
    wait_for(out, run)
    took, stderr = stop(run, signal.SIGINT)
    assert run.returncode == 130, stderr[-3000:]
    assert took <= stopping.STOP_BOUND_S
    assert not os.path.exists(os.path.join(out, layout.MANIFEST_FILE))


HANGING_CLEAN_UP = """
import sys, time
from imgpipe.pipelines import termination
termination.install()
try:
    with termination.stop_on_signals():
        try:
            # Said inside the try: a signal that lands as it returns still meets the
            # clean-up (said before it, the stop could end the work before the try began).
            print("working", flush=True)
            time.sleep(60)
        finally:
            time.sleep(600)  # a clean-up that waits for something that never comes
except termination.Terminated as e:
    sys.exit(e.exit_code)
"""


@pytest.mark.parametrize("signum", SIGNALS, ids=["TERM", "INT"])
def test_a_clean_up_that_hangs_is_cut_short_at_the_deadline(signum):
    run = subprocess.Popen(
        [sys.executable, "-c", HANGING_CLEAN_UP],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    assert run.stdout is not None and run.stdout.readline() == "working\n"
    took, stderr = stop(run, signum)
    assert run.returncode == 128 + signum
    assert termination.STOP_DEADLINE_S - 0.5 <= took <= stopping.STOP_BOUND_S
    assert "the clean-up took over" in stderr
