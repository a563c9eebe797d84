"""Server processes that live exactly as long as a `with` block.

Each process starts in its own session, so its process group holds it and whatever it
starts (a JVM's helpers, a worker pool's workers); stopping sends SIGTERM to the whole
group, then SIGKILL to what is left after a grace period. The block's exit stops them
all, whether it ends normally, raises, or is interrupted (Ctrl-C, or SIGTERM under
`termination.stop_on_signals`). A supervisor killed outright (SIGKILL) cannot stop them:
on Linux each then gets SIGKILL from the kernel (PR_SET_PDEATHSIG), so none outlives it.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field

from imgpipe.pipelines.engines import artifacts

# What a stopped server gets to end by itself before SIGKILL.
STOP_GRACE_SECONDS = 10.0
# How long a local cluster may take to answer: its JVMs start in seconds on a quiet
# machine, but on two busy cores (a training run beside it) in minutes. A server that
# dies fails the wait at once, so a long limit costs nothing when something is wrong.
STARTUP_TIMEOUT_SECONDS = 300.0
_POLL_SECONDS = 0.25
# How long stop_all waits for SIGKILLed processes to exit.
KILL_WAIT_SECONDS = 10.0
_LOG_TAIL_LINES = 15


class ServerFailed(RuntimeError):
    """A supervised process ended, or never became ready; the message has its log's tail."""


@dataclass
class Server:
    """One supervised process: its name, its Popen and the file its output goes to."""

    name: str
    process: subprocess.Popen
    log_path: str

    def log_tail(self) -> str:
        try:
            with open(self.log_path, errors="replace") as f:
                lines = f.read().splitlines()
        except OSError:
            return "(no log)"
        return "\n".join(lines[-_LOG_TAIL_LINES:])

    def check_alive(self) -> None:
        code = self.process.poll()
        if code is not None:
            raise ServerFailed(
                f"{self.name} exited with code {code}; its log {self.log_path} ends:\n"
                f"{self.log_tail()}"
            )


@dataclass
class Supervisor:
    """The processes started in one `supervised()` block, in start order."""

    log_dir: str
    servers: list[Server] = field(default_factory=list)

    def start(self, name: str, argv: Sequence[str], env: Mapping[str, str] | None = None) -> Server:
        """Starts `argv` in a new process group, its output going to <log_dir>/<name>.out."""
        log_path = os.path.join(self.log_dir, f"{name}.out")
        prefix = _die_with_parent()
        with open(log_path, "ab") as log:
            process = subprocess.Popen(
                [*prefix, *argv],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=dict(env) if env is not None else None,
                start_new_session=True,
            )
        # Tracked before anything else can raise (Ctrl-C during the wait below), so
        # that stop_all stops it too.
        server = Server(name, process, log_path)
        self.servers.append(server)
        if prefix:
            _wait_for_exec(process, prefix[0])
        return server

    def wait_until(self, ready: Callable[[], bool], what: str, timeout: float) -> None:
        """Polls `ready` until it is true, failing at once if any server has ended.

        Raises:
          ServerFailed: a server ended, or `timeout` seconds passed.
        """
        deadline = time.monotonic() + timeout
        while True:
            for server in self.servers:
                server.check_alive()
            if ready():
                return
            if time.monotonic() > deadline:
                tails = "\n".join(f"--- {s.name}:\n{s.log_tail()}" for s in self.servers)
                raise ServerFailed(
                    f"{what} not ready after {timeout:.0f} s; the logs end:\n{tails}"
                )
            time.sleep(_POLL_SECONDS)

    def check_alive(self) -> None:
        for server in self.servers:
            server.check_alive()

    def stop_all(self, grace: float = STOP_GRACE_SECONDS) -> None:
        """SIGTERM to every group (last started first), then SIGKILL to what remains."""
        for server in reversed(self.servers):
            _signal_group(server.process.pid, signal.SIGTERM)
        deadline = time.monotonic() + grace
        for server in reversed(self.servers):
            try:
                server.process.wait(max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                pass
        for server in reversed(self.servers):
            # The group outlives its leader when a child ignores SIGTERM.
            _signal_group(server.process.pid, signal.SIGKILL)
            server.process.wait()
        # SIGKILL is delivered, not yet acted on: return only once no member of any
        # group is still running, so that "stopped" means gone.
        groups = [server.process.pid for server in self.servers]
        deadline = time.monotonic() + KILL_WAIT_SECONDS
        while (left := running_in_groups(groups)) and time.monotonic() < deadline:
            for pgid in groups:
                _signal_group(pgid, signal.SIGKILL)
            time.sleep(0.05)
        if left:
            raise ServerFailed(f"processes {left} survived SIGKILL for {KILL_WAIT_SECONDS} s")


def _die_with_parent() -> list[str]:
    """The command prefix that makes a server get SIGKILL when its supervisor dies.

    util-linux's setpriv sets PR_SET_PDEATHSIG and execs the server, keeping its pid.
    Not a preexec_fn: that runs Python in the forked child, including the at-fork hooks
    of libraries the supervisor has loaded, and gRPC's (Beam loads it) aborted the child
    there ("epoll_wait error: Bad file descriptor", exit -6) before the server started.
    """
    setpriv = shutil.which("setpriv") if sys.platform == "linux" else None
    return [setpriv, "--pdeathsig", "KILL", "--"] if setpriv else []


def _wait_for_exec(process: subprocess.Popen, launcher: str, timeout: float = 10.0) -> None:
    """Returns once `launcher` has exec'd the server (or the process ended), so that its
    death signal is set: a supervisor killed before that would leave the server behind."""
    launcher_name = os.path.basename(launcher)
    deadline = time.monotonic() + timeout
    while process.poll() is None and time.monotonic() < deadline:
        try:
            with open(f"/proc/{process.pid}/cmdline", "rb") as f:
                first = f.read().split(b"\0", 1)[0].decode(errors="replace")
        except OSError:
            return
        # Empty while an exec is under way: the launcher's own, whose Popen returned
        # as the old image went and before the new one's arguments are in place (this
        # once let a supervisor die before setpriv set the death signal).
        if first and os.path.basename(first) != launcher_name:
            return
        time.sleep(0.005)


def running_in_groups(pgids: Sequence[int]) -> list[int]:
    """The processes of these process groups that have not exited (zombies have)."""
    wanted, found = set(pgids), []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if fields[0] != "Z" and int(fields[2]) in wanted:
            found.append(int(entry))
    return found


def _signal_group(pgid: int, signum: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signum)


@contextlib.contextmanager
def supervised(log_dir: str) -> Iterator[Supervisor]:
    """A Supervisor whose processes are all stopped when the block is left, however."""
    os.makedirs(log_dir, exist_ok=True)
    supervisor = Supervisor(log_dir)
    try:
        yield supervisor
    finally:
        supervisor.stop_all()


@dataclass(frozen=True, kw_only=True)
class LocalCluster:
    """What every cluster started on this machine has: Beam's job server, the SDK worker
    pool, and the supervisor of their processes once they run."""

    job_port: int
    worker_pool_port: int
    supervisor: Supervisor | None = field(default=None, compare=False, repr=False)

    def check_alive(self) -> None:
        """Raises ServerFailed, with its log's tail, if a process of the cluster ended."""
        if self.supervisor is not None:
            self.supervisor.check_alive()


def portable_beam_args(job_endpoint: str, worker_pool: str) -> list[str]:
    """Beam arguments that submit to a job server and run the Python stages on an external
    SDK worker pool (the Kubernetes sidecar pattern): what every local cluster hands out."""
    return [
        "--runner=PortableRunner",
        f"--job_endpoint={job_endpoint}",
        "--environment_type=EXTERNAL",
        f"--environment_config={worker_pool}",
    ]


def start_worker_pool(supervisor: Supervisor, port: int) -> Server:
    """Starts Beam's SDK worker pool, which runs a job's Python stages, on `port`."""
    return supervisor.start(
        "worker-pool",
        [
            sys.executable,
            "-m",
            "apache_beam.runners.worker.worker_pool_main",
            f"--service_port={port}",
        ],
    )


def job_server_command(
    classpath: str,
    main: str,
    master_flag: str,
    job_port: int,
    host: str,
    java_options: Sequence[str] = (),
) -> list[str]:
    """The command of a Beam job server for a runner (`main`), submitting to the cluster
    `master_flag` names; its artifact port is free on `host` and expansion is off."""
    return [
        artifacts.java(),
        *java_options,
        "-cp",
        classpath,
        main,
        master_flag,
        f"--job-port={job_port}",
        f"--artifact-port={free_port(host)}",
        "--expansion-port=0",
    ]


def accepts_connections(host: str, port: int) -> bool:
    """Whether a server listens on `host`:`port` now."""
    with socket.socket() as s:
        s.settimeout(1.0)
        return s.connect_ex((host, port)) == 0


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port free on `host` now (a server started next may take it)."""
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]
