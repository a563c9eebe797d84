"""`imgpipe engine flink|spark`: a Flink or Spark cluster on this machine, until Ctrl-C.

It prints where the cluster is and the Beam arguments that run a pipeline on it, then
waits; Ctrl-C (or SIGTERM) stops every process of the cluster.

Ctrl-C is how this command is meant to end, so it ends alike whenever the signal comes:
while the cluster starts, while the first lines print, or while it serves, every
process started so far is stopped, "<Engine> cluster stopped." is printed, and the exit
code is 0. (It once caught the signal only in the serving loop: one that came between
the first line and the loop, as on a loaded machine, left as exit 130.)
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shlex
import tempfile
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from imgpipe.pipelines.engines import flink, spark

_CHECK_SECONDS = 1.0


def register(subparsers: argparse._SubParsersAction) -> None:
    from imgpipe.pipelines.engines.flink import WORKER_POOL_PORT

    parser = subparsers.add_parser(
        "engine", help="start a distributed engine on this machine, until Ctrl-C"
    )
    engines = parser.add_subparsers(title="engines", metavar="ENGINE")
    flink = engines.add_parser(
        "flink",
        help="a Flink session cluster (JobManager, TaskManager with 2 slots), Beam's "
        "job server and the Beam SDK worker pool",
    )
    flink.add_argument(
        "--workdir",
        help="its configuration, logs and temporary files (default: a temporary folder, "
        "removed at the end)",
    )
    flink.add_argument("--rest-port", type=int, default=8081, help="the JobManager's REST port")
    flink.add_argument(
        "--worker-pool-port", type=int, default=WORKER_POOL_PORT, help="the Beam worker pool's port"
    )
    flink.add_argument("--job-port", type=int, default=8099, help="Beam's job server's port")
    flink.set_defaults(handler=run_flink)
    spark = engines.add_parser(
        "spark",
        help="a Spark standalone cluster (master, worker with 2 cores), Beam's Spark job "
        "server and the Beam SDK worker pool",
    )
    spark.add_argument(
        "--workdir",
        help="its logs and the worker's folders (default: a temporary folder, removed at the end)",
    )
    spark.set_defaults(handler=run_spark)


def run_flink(args: argparse.Namespace) -> int:
    from imgpipe.pipelines.engines import flink

    with _stopped_by_a_signal(), tempfile.TemporaryDirectory(prefix="imgpipe-flink-") as scratch:
        work_dir = args.workdir or scratch
        os.makedirs(work_dir, exist_ok=True)
        with flink.flink_cluster(
            work_dir, args.rest_port, args.worker_pool_port, args.job_port
        ) as cluster:
            print(
                f"Flink {flink.FLINK_VERSION} session cluster at {cluster.rest_url}: "
                f"1 TaskManager, {flink.SLOTS} slots; Beam worker pool at "
                f"{flink.HOST}:{cluster.worker_pool_port}; logs in {work_dir}/logs",
                flush=True,
            )
            print(
                f"Beam's job server at {flink.HOST}:{cluster.job_port}. Beam arguments: "
                + shlex.join(cluster.beam_args()),
                flush=True,
            )
            _serve_until_interrupted(cluster)
    print("Flink cluster stopped.", flush=True)
    return 0


@contextlib.contextmanager
def _stopped_by_a_signal() -> Iterator[None]:
    """Leaves quietly on Ctrl-C or SIGTERM, whenever it comes inside: the blocks within
    have stopped what they started on the way out."""
    from imgpipe.pipelines import termination

    try:
        yield
    except termination.Terminated:
        termination.stop_handled()


def _serve_until_interrupted(cluster: flink.FlinkCluster | spark.SparkCluster) -> None:
    """Waits for Ctrl-C or SIGTERM (Terminated); raises ServerFailed if a process of the
    cluster ends."""
    print("Ctrl-C stops it.", flush=True)
    while True:
        cluster.check_alive()
        time.sleep(_CHECK_SECONDS)


def run_spark(args: argparse.Namespace) -> int:
    from imgpipe.pipelines.engines import spark

    with _stopped_by_a_signal(), tempfile.TemporaryDirectory(prefix="imgpipe-spark-") as scratch:
        work_dir = args.workdir or scratch
        os.makedirs(work_dir, exist_ok=True)
        with spark.spark_cluster(work_dir) as cluster:
            print(
                f"Spark {spark.SPARK_VERSION} standalone cluster at {cluster.master_url}: "
                f"1 worker, {spark.WORKER_CORES} cores; Beam's Spark job server at "
                f"{cluster.job_endpoint}; logs in {work_dir}/logs",
                flush=True,
            )
            print("Beam arguments: " + shlex.join(cluster.beam_args()), flush=True)
            _serve_until_interrupted(cluster)
    print("Spark cluster stopped.", flush=True)
    return 0
