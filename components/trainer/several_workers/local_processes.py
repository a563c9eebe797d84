"""The workers of a training on several workers (trainer.workers > 1) as processes of
the Trainer's own machine (choice.PROCESSES, the default launcher): started together,
watched together, stopped together.

`run` starts `python -m imgpipe.components.trainer.several_workers.worker <folder>`
once per worker, each with its TF_CONFIG (free ports of this machine) and its own GPUs,
after saving the job into that folder (replicas.save_job), and waits for all of them:
- all exit 0: the training is done, and the chief (worker 0) has exported;
- one fails: the others are stopped at once (SIGKILL to each process group: TensorFlow
  catches SIGTERM) and `run` raises one line naming that worker and its error. A worker
  killed outright is noticed within a poll; the others, whose collectives fail as its
  sockets close, would end by themselves too.
Each worker's output goes to <log_dir>/worker-<i>.log; the chief's also to this process's
stderr, as a Trainer in one process would write it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from typing import NoReturn

from imgpipe.components.trainer.several_workers import choice, cluster, replicas

WORKER_MODULE = choice.WORKER_MODULE
CUDA_VISIBLE_DEVICES = "CUDA_VISIBLE_DEVICES"
_POLL_SECONDS = 0.2
_KILL_WAIT_SECONDS = 10.0


@dataclasses.dataclass(frozen=True)
class LocalProcesses:
    """Worker processes of this machine, each with its own GPUs (`gpus`, assign_gpus)
    (launchers.Launcher)."""

    gpus: Sequence[str]
    shares_machine = True

    def run(
        self, job: object, workers: int, folder: str, log_dir: str, shared_paths: Sequence[str]
    ) -> None:
        run(job, workers, folder, log_dir, self.gpus)


def assign_gpus(visible: Sequence[str], num_gpus: int | None, workers: int) -> list[str]:
    """CUDA_VISIBLE_DEVICES for each of `workers` processes on this machine: `num_gpus`
    GPUs each, none shared (NCCL runs one rank per GPU); "" hides every GPU.

    Args:
      visible: the ids of the GPUs this process may use, in order.
      num_gpus: trainer.num_gpus: GPUs per worker; None asks for all.

    Raises:
      ValueError: the GPUs cannot be divided so, naming the settings and the fix.
    """
    if num_gpus is None:
        if not visible:
            return [""] * workers
        raise ValueError(
            f"trainer.workers={workers} with trainer.num_gpus unset (all GPUs): worker "
            f"processes on one machine cannot share a GPU; set trainer.num_gpus to the GPUs "
            f"of each worker (at most {len(visible) // workers} of the {len(visible)} here)"
        )
    if num_gpus * workers > len(visible):
        raise ValueError(
            f"trainer.workers={workers} x trainer.num_gpus={num_gpus} needs "
            f"{num_gpus * workers} GPUs, and {len(visible)} are visible; set trainer.num_gpus "
            f"to {len(visible) // workers} or fewer, or trainer.workers lower"
        )
    return [",".join(visible[i * num_gpus : (i + 1) * num_gpus]) for i in range(workers)]


def visible_gpu_ids(count: int) -> list[str]:
    """The ids of this process's `count` GPUs, as a child's CUDA_VISIBLE_DEVICES names
    them: those of this process's CUDA_VISIBLE_DEVICES, if it is set."""
    listed = os.environ.get(CUDA_VISIBLE_DEVICES)
    if listed is None:
        return [str(i) for i in range(count)]
    return [i.strip() for i in listed.split(",") if i.strip()][:count]


def run(
    job: object,
    workers: int,
    folder: str,
    log_dir: str,
    gpus: Sequence[str],
) -> None:
    """Runs `job` on `workers` worker processes, and returns once all have finished.

    Args:
      job: what worker.py trains (pickled into `folder`).
      folder: the job's folder, which the workers may write into too.
      log_dir: where each worker's log goes.
      gpus: each worker's CUDA_VISIBLE_DEVICES (assign_gpus).

    Raises:
      ValueError: a worker refused a setting (its one line).
      WorkersFailed: a worker failed (its one line); every worker has ended.
    """
    os.makedirs(log_dir, exist_ok=True)
    replicas.save_job(folder, job)
    addresses = cluster.local_addresses(workers)
    processes: list[subprocess.Popen] = []
    try:
        for index in range(workers):
            processes.append(
                _start(
                    cluster.Member(addresses, index),
                    folder,
                    replicas.log_path(log_dir, index),
                    gpus,
                )
            )
        _watch(processes, addresses, log_dir)
    finally:
        _stop(processes)


def _start(member: cluster.Member, folder: str, log: str, gpus: Sequence[str]) -> subprocess.Popen:
    # Where this process found the imgpipe namespace: a checkout's root, site-packages.
    roots = [os.path.dirname(p) for p in sys.modules["imgpipe"].__path__]
    env = {
        **os.environ,
        cluster.TF_CONFIG: cluster.tf_config(member),
        CUDA_VISIBLE_DEVICES: gpus[member.index],
        "PYTHONPATH": os.pathsep.join([*roots, os.environ.get("PYTHONPATH", "")]).rstrip(
            os.pathsep
        ),
    }
    with open(log, "wb") as out:
        return subprocess.Popen(
            [*_die_with_parent(), sys.executable, "-m", WORKER_MODULE, folder],
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
        )


def _die_with_parent() -> list[str]:
    """util-linux's setpriv, which sets PR_SET_PDEATHSIG and execs the worker: a Trainer
    killed outright takes its workers with it (as pipelines/engines/processes.py does)."""
    setpriv = shutil.which("setpriv") if sys.platform == "linux" else None
    return [setpriv, "--pdeathsig", "KILL", "--"] if setpriv else []


def _watch(processes: list[subprocess.Popen], addresses: Sequence[str], log_dir: str) -> None:
    """Waits for every worker to exit 0, forwarding the chief's log; raises at the first
    failure."""
    with open(replicas.log_path(log_dir, cluster.CHIEF), "rb") as chief_log:
        while True:
            _forward(chief_log)
            codes = [p.poll() for p in processes]
            failed = [i for i, code in enumerate(codes) if code not in (None, 0)]
            if failed:
                _forward(chief_log)
                # A worker killed by a signal is the cause; the others' errors follow it.
                first = min(failed, key=lambda i: (codes[i] >= 0, i))  # type: ignore[operator]
                _fail(first, codes[first], addresses, log_dir)
            if all(code == 0 for code in codes):
                _forward(chief_log)
                return
            time.sleep(_POLL_SECONDS)


def _forward(log) -> None:
    data = log.read()
    if data:
        sys.stderr.write(data.decode(errors="replace"))
        sys.stderr.flush()


def _fail(index: int, code: int | None, addresses: Sequence[str], log_dir: str) -> NoReturn:
    assert code is not None
    how = (
        f"was killed by {signal.Signals(-code).name}"
        if code < 0 and -code in signal.Signals._value2member_map_
        else f"exited with code {code}"
    )
    try:
        with open(replicas.log_path(log_dir, index), errors="replace") as f:
            text = f.read()
    except OSError:
        text = ""
    member = cluster.Member(tuple(addresses), index)
    replicas.raise_failed(
        member.name, how, text, len(addresses), "the other workers were stopped", log_dir
    )


def _stop(processes: list[subprocess.Popen]) -> None:
    """SIGKILL to the group of every worker still running; returns once they have ended."""
    for process in processes:
        if process.poll() is None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(process.pid, signal.SIGKILL)
    for process in processes:
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(_KILL_WAIT_SECONDS)
