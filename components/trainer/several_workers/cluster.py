"""One worker of a training on several (trainer.workers > 1): its place in the cluster,
its connection to the others, and what Keras 3 needs fixed to train with them.

Each worker is a process started with TF_CONFIG (`tf_config`), which makes its
tf.distribute.MultiWorkerMirroredStrategy in `connect` before TensorFlow does anything
else. Every wait is bounded:
- joining the cluster: `Timeouts.connect_s`; a worker that cannot reach the others ends
  with one line naming the addresses that do not answer (its join_watchdog process kills
  it where TensorFlow's wait holds the interpreter);
- each collective (all-reduce) of training: `Timeouts.collective_s`, so a worker whose
  peer vanished without closing its connection (a lost node) fails instead of waiting;
- a peer's heartbeat (TF's coordination service): `Timeouts.heartbeat_s`.
A peer that dies on this machine closes its sockets, and the others fail at once.

Keras 3.15's TensorFlow trainer has two faults with this strategy (keras-team/keras#20585,
tensorflow/tensorflow#72388), both in how it reduces per-replica values across workers;
`fix_keras` replaces those two reductions, in worker processes only.
"""

from __future__ import annotations

import dataclasses
import json
import os
import socket
import subprocess
import sys

import tensorflow as tf
from absl import logging

from imgpipe.components.common.runtime import printable
from imgpipe.components.trainer.several_workers import join_watchdog

TF_CONFIG = "TF_CONFIG"
WORKER_JOB = "worker"
CHIEF = 0  # the worker that exports and publishes backups: worker 0, as in TF's docs
HOST = "localhost"
# A worker that cannot reach the others exits with this code (and one line naming them);
# one whose wait could not be interrupted is killed (SIGKILL) by its join_watchdog.
EXIT_UNREACHABLE = 3
ERROR_MARK = join_watchdog.ERROR_MARK
WATCHDOG_MODULE = "imgpipe.components.trainer.several_workers.join_watchdog"


@dataclasses.dataclass(frozen=True)
class Timeouts:
    """Bounds on a worker's waits for the others, in seconds.

    Attributes:
      connect_s: to join the cluster (every worker started and answering).
      collective_s: for one collective op of training; longer than the slowest step
        plus the chief's longest pause between steps (publishing a backup).
      heartbeat_s: without a heartbeat from a peer before it counts as gone.
    """

    connect_s: float = 180.0
    collective_s: float = 600.0
    heartbeat_s: float = 60.0


@dataclasses.dataclass(frozen=True)
class Member:
    """One worker: every worker's host:port (the chief first), and which one it is."""

    addresses: tuple[str, ...]
    index: int

    @property
    def workers(self) -> int:
        return len(self.addresses)

    @property
    def chief(self) -> bool:
        return self.index == CHIEF

    @property
    def address(self) -> str:
        return self.addresses[self.index]

    @property
    def name(self) -> str:
        return join_watchdog.worker_name(self.addresses, self.index)


def local_addresses(count: int, host: str = HOST) -> tuple[str, ...]:
    """`count` host:port addresses whose ports are free on this machine now (held open
    together while chosen, so that no two are the same)."""
    sockets = [socket.socket() for _ in range(count)]
    try:
        for s in sockets:
            s.bind((host, 0))
        return tuple(f"{host}:{s.getsockname()[1]}" for s in sockets)
    finally:
        for s in sockets:
            s.close()


def tf_config(member: Member) -> str:
    """TF_CONFIG for `member`: the cluster's workers, and its own task."""
    return json.dumps(
        {
            "cluster": {WORKER_JOB: list(member.addresses)},
            "task": {"type": WORKER_JOB, "index": member.index},
        }
    )


def from_tf_config(text: str) -> Member:
    """The Member that TF_CONFIG describes (workers only: this project starts no chief or
    evaluator task).

    Raises:
      ValueError: not a TF_CONFIG of workers, naming what is wrong.
    """
    try:
        config = json.loads(text)
        addresses = tuple(str(a) for a in config["cluster"][WORKER_JOB])
        task = config["task"]
        index = int(task["index"])
    except (ValueError, KeyError, TypeError) as e:
        raise ValueError(f"{TF_CONFIG} is not a cluster of workers with a task: {e}") from None
    if task.get("type") != WORKER_JOB or not 0 <= index < len(addresses) or len(addresses) < 2:
        raise ValueError(
            f"{TF_CONFIG} must name a {WORKER_JOB} task among 2 or more workers, got "
            f"{printable.shown(text)}"
        )
    return Member(addresses, index)


def _configure_coordination(member: Member, timeouts: Timeouts) -> None:
    """TF's coordination service, as MultiWorkerMirroredStrategy would configure it, but
    with bounded waits (TF's default waits for a missing worker without end)."""
    try:
        from tensorflow.compiler.xla.tsl.protobuf import coordination_config_pb2
        from tensorflow.python.eager import context
    except ImportError:  # another TensorFlow layout: its defaults, and the watchdog
        logging.warning("TF's coordination service settings were not found: its defaults")
        return
    context.context().configure_coordination_service(
        service_type="standalone",
        service_leader=f"/job:{WORKER_JOB}/replica:0/task:{CHIEF}",
        cluster_register_timeout_in_ms=int(timeouts.connect_s * 1000),
        heartbeat_timeout_in_ms=int(timeouts.heartbeat_s * 1000),
        shutdown_barrier_timeout_in_ms=int(timeouts.collective_s * 1000),
        coordinated_jobs=[
            coordination_config_pb2.CoordinatedJob(name=WORKER_JOB, num_tasks=member.workers)
        ],
    )


def connect(member: Member, timeouts: Timeouts = Timeouts()) -> tf.distribute.Strategy:
    """This worker's MultiWorkerMirroredStrategy, once every worker has joined: over its
    GPUs (NCCL between workers) or else its CPU (RING). Call it before anything else
    runs TensorFlow in the process.

    A worker that cannot join within `timeouts.connect_s` prints ERROR_MARK and one line
    naming the addresses that do not answer (join_watchdog.unreachable_line), and exits
    with EXIT_UNREACHABLE, or is killed by its join_watchdog when TensorFlow's wait holds
    the interpreter.
    """
    os.environ[TF_CONFIG] = tf_config(member)
    _configure_coordination(member, timeouts)
    gpus = tf.config.list_physical_devices("GPU")
    implementation = tf.distribute.experimental.CommunicationImplementation
    options = tf.distribute.experimental.CommunicationOptions(
        implementation=implementation.NCCL if gpus else implementation.RING,
        timeout_seconds=timeouts.collective_s,
    )
    watchdog = _watch_join(member, timeouts.connect_s)
    try:
        strategy = tf.distribute.MultiWorkerMirroredStrategy(communication_options=options)
        # A first all-reduce: every worker has joined, and collectives pass between them.
        joined = strategy.reduce(
            tf.distribute.ReduceOp.SUM, strategy.run(lambda: tf.constant(1.0)), axis=None
        )
    except tf.errors.OpError:
        line = join_watchdog.unreachable_line(member.addresses, member.index, timeouts.connect_s)
        print(f"{ERROR_MARK} {line}", file=sys.stderr, flush=True)
        os._exit(EXIT_UNREACHABLE)  # TensorFlow's cluster state cannot be shut down cleanly
    finally:
        _stop_watch(watchdog)
    replicas = strategy.num_replicas_in_sync
    if round(float(joined)) != replicas:
        raise RuntimeError(f"{member.name}: {float(joined)} replicas answered, not {replicas}")
    logging.info(
        "%s joined: %d replicas in sync over %s, %s all-reduce",
        member.name,
        replicas,
        ", ".join(member.addresses),
        options.implementation.name,
    )
    return strategy


def _watch_join(member: Member, seconds: float) -> subprocess.Popen:
    """Starts this worker's join_watchdog, which ends it if it has not joined in time."""
    roots = [os.path.dirname(p) for p in sys.modules["imgpipe"].__path__]
    path = os.pathsep.join([*roots, os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            WATCHDOG_MODULE,
            str(os.getpid()),
            str(seconds),
            str(member.index),
            *member.addresses,
        ],
        stdin=subprocess.PIPE,
        env={**os.environ, "PYTHONPATH": path},
    )


def _stop_watch(watchdog: subprocess.Popen) -> None:
    if watchdog.stdin is not None:
        watchdog.stdin.close()  # joined: the watchdog ends
    watchdog.wait()


def fix_keras() -> None:
    """Replaces the two reductions of Keras 3's TensorFlow trainer that fail with
    MultiWorkerMirroredStrategy; other strategies keep Keras' own.

    - fit() first builds the model on one batch, which it makes by `strategy.reduce(MEAN,
      batch)` of the first per-replica batch: across workers that fails ("Attempt to
      convert a value (PerReplica...)", keras-team/keras#20585). Any one replica's batch
      has the shapes the build needs: it takes this worker's first.
    - Each step's metrics are reduced with `strategy.reduce(MEAN, value, axis=0)`, which
      fails on the scalars they are ("Invalid reduction dimension 0 for input with 0
      dimensions", tensorflow/tensorflow#72388): the mean over every replica, axis None,
      is what one process computes over its replicas.

    Raises:
      RuntimeError: this Keras no longer has the functions replaced (check whether it
        still needs the fixes: docs/distributed-training.md).
    """
    from keras.src import tree
    from keras.src.backend.tensorflow import trainer as keras_trainer

    trainer = keras_trainer.TensorFlowTrainer
    multi_worker = getattr(keras_trainer, "_collective_all_reduce_multi_worker", None)
    build = getattr(trainer, "_maybe_symbolic_build", None)
    reduce = getattr(keras_trainer, "reduce_per_replica", None)
    if multi_worker is None or build is None or reduce is None:
        raise RuntimeError(
            "keras.src.backend.tensorflow.trainer has changed: the multi-worker fixes of "
            "components/trainer/several_workers/cluster.py do not apply to this Keras"
        )
    if getattr(build, "_imgpipe_fixed", False):
        return

    def one_replica(strategy: tf.distribute.Strategy, value):
        if isinstance(value, tf.distribute.DistributedValues):
            return strategy.experimental_local_results(value)[0]
        return value

    def symbolic_build(self, iterator=None, data_batch=None):
        if iterator is not None and multi_worker(self.distribute_strategy):
            for _, _, batches in iterator:
                first = next(batches)
                data_batch = tree.map_structure(
                    lambda v: one_replica(self.distribute_strategy, v), first
                )
                break
            iterator = None
        return build(self, iterator=iterator, data_batch=data_batch)

    def reduce_per_replica(values, strategy, reduction):
        if reduction in ("auto", "mean") and multi_worker(strategy):
            return tree.map_structure(
                lambda v: strategy.reduce(tf.distribute.ReduceOp.MEAN, v, axis=None), values
            )
        return reduce(values, strategy, reduction)

    symbolic_build._imgpipe_fixed = True  # type: ignore[attr-defined]
    trainer._maybe_symbolic_build = symbolic_build
    keras_trainer.reduce_per_replica = reduce_per_replica
