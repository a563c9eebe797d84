"""Progress bars on a terminal (pipelines/cli/progress.py): `imgpipe convert`'s, and in
`imgpipe run local` the conversion's and the image statistics' between their step
lines; none on a pipe or with --no-progress; a stop by signal is not held by one; and
the counts behind them (components/common/runtime/progress.py) never fail the work.

The commands run as a user runs them, on a pseudo-terminal (stdout and stderr both on
it, so the order of what they write is the order a user reads), or on pipes."""

from __future__ import annotations

import argparse
import fcntl
import os
import pty
import re
import signal
import struct
import subprocess
import sys
import termios
import threading
import time

import pytest

from imgpipe.components.common.runtime import phases, progress
from imgpipe.pipelines.cli import chatter
from imgpipe.pipelines.cli import progress as bars
from tests import imagegen, procfs, retraining_data, stopping, waiting

COMMAND = [sys.executable, "-m", "imgpipe.pipelines.cli"]
# A terminal's size, as a terminal emulator sets it.
ROWS, COLUMNS = 24, 100
# A tqdm bar's drawing: "converted: 100%|██████████| 36/36 [00:00<00:00, 70.1img/s]" (or
# "1.27s/img" below one image a second).
BAR = re.compile(r"^(\w+): +(\d+)%\|.*\| (\d+)/(\d+) \[.*(?:img/s|s/img)\]$")
# A bar's text, in any of its drawings.
BAR_TEXT = "%|"


class Terminal:
    """A command whose stdout and stderr are a pseudo-terminal; what it wrote is read
    as it comes, so that it never blocks on a full terminal."""

    def __init__(self, argv: list[str], env: dict[str, str] | None = None):
        master, slave = pty.openpty()
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", ROWS, COLUMNS, 0, 0))
        self._master = master
        self._chunks: list[bytes] = []
        self.process = subprocess.Popen(
            [*COMMAND, *argv],
            stdin=subprocess.DEVNULL,
            stdout=slave,
            stderr=slave,
            env={**os.environ, **(env or {})},
        )
        os.close(slave)
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        while True:
            try:
                chunk = os.read(self._master, 65536)
            except OSError:  # EIO: every writer has closed the terminal
                return
            if not chunk:
                return
            self._chunks.append(chunk)

    @property
    def text(self) -> str:
        return b"".join(self._chunks).decode(errors="replace")

    def wait(self, timeout: float) -> int:
        try:
            code = self.process.wait(timeout)
        finally:
            if self.process.poll() is None:
                self.process.kill()
                self.process.wait()
            # Every writer has closed the terminal: the reader ends at its EIO.
            self._reader.join(waiting.AT_ONCE_S)
            assert not self._reader.is_alive(), "the terminal's reader did not end"
            os.close(self._master)
        return code


def screen_lines(text: str) -> list[str]:
    """The lines a user reads: the terminal's \\r\\n line ends, and of a line redrawn
    with \\r (a bar), its last drawing."""
    return [line.split("\r")[-1] for line in text.replace("\r\n", "\n").split("\n")]


def bar_between(lines: list[str], step: str) -> re.Match:
    """The bar between the step's start and end lines, the only line there."""
    start = next(i for i, line in enumerate(lines) if re.match(rf"step  {step} +started$", line))
    assert re.match(rf"step  {step} +done in ", lines[start + 2]), lines[start : start + 3]
    bar = BAR.match(lines[start + 1])
    assert bar, lines[start + 1]
    return bar


@pytest.mark.pipeline
def test_run_local_on_a_terminal_shows_the_conversion_and_the_statistics_between_their_lines(
    tmp_path,
):
    data = retraining_data.span_folder(str(tmp_path / "images"), 1, per_class=12, size=32)
    config = tmp_path / "pipeline.yaml"
    config.write_text(
        "trainer: {image_size: 32, batch_size: 8, epochs: 1, train_steps: 8, eval_steps: 1, "
        "tensorboard_images: 0}\n"
        "example_gen: {output: {num_shards: 1}}\n"
    )
    argv = ["run", "local", "--data", data, "--config", str(config)]
    argv += ["--pipeline-root", str(tmp_path / "root"), "--serving-dir", str(tmp_path / "serving")]
    terminal = Terminal(argv, env={"TMPDIR": str(tmp_path)})

    code = terminal.wait(timeout=waiting.TRAINING_S)

    assert code == 0, terminal.text[-3000:]
    lines = screen_lines(terminal.text)
    images = 3 * 12
    converted = bar_between(lines, "ImageExampleGen")
    assert converted.groups() == ("converted", "100", str(images), str(images))
    analysed = bar_between(lines, "ImageStatistics")
    assert analysed.groups() == ("analysed", "100", str(images), str(images))
    # The other steps count nothing: no bar, and each bar's line ended before the next.
    assert [line for line in lines if BAR_TEXT in line] == [converted[0], analysed[0]]
    assert "model (served)" in terminal.text


@pytest.mark.component
def test_convert_on_a_terminal_shows_a_bar_that_ends_before_the_summary(tmp_path):
    src = str(tmp_path / "src")
    imagegen.make_image_folder(src, {"a": 10, "b": 10})
    terminal = Terminal(["convert", src, str(tmp_path / "out")])

    assert terminal.wait(timeout=waiting.JOB_S) == 0, terminal.text[-3000:]
    lines = screen_lines(terminal.text)
    written = lines.index("images written   20")
    assert BAR.match(lines[written - 1]).groups() == ("converted", "100", "20", "20")
    assert [line for line in lines if BAR_TEXT in line] == [lines[written - 1]]


@pytest.mark.component
def test_no_bar_on_a_pipe_nor_with_no_progress(tmp_path):
    src = str(tmp_path / "src")
    imagegen.make_image_folder(src, {"a": 10, "b": 10})
    piped = subprocess.run(
        [*COMMAND, "convert", src, str(tmp_path / "piped")],
        capture_output=True,
        text=True,
        timeout=waiting.JOB_S,
    )
    assert piped.returncode == 0, piped.stderr
    assert "images written   20" in piped.stdout
    assert BAR_TEXT not in piped.stderr + piped.stdout

    terminal = Terminal(["convert", src, str(tmp_path / "told"), "--no-progress"])
    assert terminal.wait(timeout=waiting.JOB_S) == 0, terminal.text[-3000:]
    assert "images written   20" in terminal.text
    assert BAR_TEXT not in terminal.text


@pytest.mark.component
@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["INT", "TERM"])
def test_a_stop_ends_the_bar_and_the_command_within_the_bound(tmp_path, signum):
    """The conversion stops itself (SIGSTOP) as its first batch is read, the bar on; the
    signal then ends it within the bound, the bar's line ended before the error's."""
    src = str(tmp_path / "src")
    imagegen.make_image_folder(src, {"a": 10, "b": 10})
    terminal = Terminal(
        ["convert", src, str(tmp_path / "out")],
        env={phases.STOP_AT_ENV: f"{phases.CONVERTING}:STOP"},
    )
    pid = terminal.process.pid
    deadline = time.monotonic() + waiting.JOB_S
    while (procfs.stat(pid) or ["Z"])[0] not in ("T", "Z") and time.monotonic() < deadline:
        time.sleep(0.1)
    assert (procfs.stat(pid) or ["Z"])[0] == "T", terminal.text[-3000:]

    sent = time.monotonic()
    os.kill(pid, signum)
    os.kill(pid, signal.SIGCONT)
    code = terminal.wait(timeout=waiting.AT_ONCE_S)
    took = time.monotonic() - sent

    assert code == 128 + signum, terminal.text[-3000:]
    assert took < stopping.STOP_BOUND_S, took  # the product's promise (issue 45)
    lines = screen_lines(terminal.text)
    error = next(i for i, line in enumerate(lines) if line.startswith("imgpipe: error: stopped"))
    bar = BAR.match(lines[error - 1])
    assert bar and bar[1] == "converted", lines[error - 1]


@pytest.mark.unit
def test_the_bar_is_wanted_on_a_terminal_without_no_progress(monkeypatch):
    master, slave = pty.openpty()
    read_end, write_end = os.pipe()
    try:
        for fd, no_progress, wanted in [
            (slave, False, True),
            (slave, True, False),
            (write_end, False, False),
        ]:
            monkeypatch.setattr(chatter, "_user_stderr", fd)
            assert bars.wanted(argparse.Namespace(no_progress=no_progress)) is wanted
    finally:
        for fd in (master, slave, read_end, write_end):
            os.close(fd)


@pytest.mark.unit
def test_the_counts_are_summed_and_a_count_that_cannot_be_written_is_dropped(tmp_path):
    folder = str(tmp_path / "progress")
    os.mkdir(folder)
    assert progress.read(folder) is None  # no total yet: no bar
    a, b = progress.Counter(folder), progress.Counter(folder)
    a.add(3)
    b.add(2)
    a.flush()
    b.flush()
    (tmp_path / "progress" / "count-junk.tmp").write_text("100")  # a write in progress
    progress.write_total(folder, 10, "converted")
    assert progress.read(folder) == progress.Progress(10, "converted", 5)

    os.rename(folder, str(tmp_path / "gone"))  # the command ended, or a remote worker
    a.add(1)
    a.flush()  # dropped, not raised; and the counter writes no more
    progress.write_total(folder, 10, "converted")
    assert not os.path.exists(folder)
    progress.Counter(None).add(1)  # no folder: counts nothing


@pytest.mark.unit
def test_run_locals_steps_see_their_own_folder_only_while_they_run(monkeypatch):
    monkeypatch.setenv(progress.PROGRESS_DIR_ENV, "/the/users/own")
    announced, seen = [], []

    def announce(step: str, event: str, seconds: float | None) -> None:
        announced.append((step, event, progress.folder_from_env()))

    with bars.StepBars(True, announce) as step:
        assert progress.folder_from_env() is None
        step("ImageExampleGen", "started", None)
        folder = progress.folder_from_env()
        assert folder is not None and os.path.isdir(folder)
        seen.append(folder)
        step("ImageExampleGen", "done", 1.0)
        assert progress.folder_from_env() is None and not os.path.exists(folder)
        step("Trainer", "started", None)
        seen.append(progress.folder_from_env())
    assert progress.folder_from_env() == "/the/users/own"
    assert seen[0] != seen[1] and not os.path.exists(seen[1])
    # Each line is announced with no step's folder set: the bar has ended before it.
    assert announced == [
        ("ImageExampleGen", "started", None),
        ("ImageExampleGen", "done", None),
        ("Trainer", "started", None),
    ]

    with bars.StepBars(False, announce) as step:
        step("ImageExampleGen", "started", None)
        assert progress.folder_from_env() is None


@pytest.mark.unit
def test_a_bar_that_is_off_makes_no_folder():
    with bars.ProgressBar(enabled=False) as bar:
        assert bar.directory is None
    bar.end()  # twice is harmless
