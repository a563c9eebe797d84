"""A Spark standalone cluster on this machine: a master and a worker with two cores,
separate JVMs, from the Spark jars of PyPI's pyspark in the artifact cache, plus Beam's
portable Spark job server and the Beam SDK worker pool that runs its Python stages.

Maven Central, as this project's machines reach it, serves no Beam 2.77 Java artifact
(beam-sdks-java-core stops at 2.76.0) and no Beam job-server jar of any version
(beam-runners-spark-3-job-server has no folder at all). The newest Spark runner whose
whole dependency set it serves is beam-runners-spark-3 2.62.0 (2.70.0 needs
beam-runners-java-job-service 2.70.0, which it does not serve). So the job server runs
from that runner's jars, resolved by Maven, with Spark's own jars first on the
classpath; Beam 2.77's Python SDK submits to it over the portable job API, and
tests/test_spark_engine.py shows the two agree byte for byte with the DirectRunner.

The worker pool is the EXTERNAL environment of the Kubernetes sidecar pattern, as for
Flink. Everything a cluster writes (logs, the worker's application folders) is under its
work folder; `spark_cluster()` stops the processes when its block is left, however it is
left.
"""

from __future__ import annotations

import contextlib
import glob
import json
import os
import sys
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, replace

from imgpipe.pipelines.engines import artifacts, processes

# PyPI's pyspark ships Spark's jars and launcher scripts; only its source distribution
# exists, so bin/fetch-engines downloads it by hash and keeps jars/ and bin/.
SPARK_VERSION = "3.5.9"
PYSPARK_SHA256 = "ea27adc39ddac9413b8951e45aa748cbed6c785971b81386efc41938f6243d93"
BEAM_RUNNER_VERSION = "2.62.0"
JOB_SERVER_COORDINATES = f"org.apache.beam:beam-runners-spark-3:{BEAM_RUNNER_VERSION}"
# Cache folders, as bin/fetch-engines names them.
SPARK_ARTIFACT = "spark"
JOB_SERVER_ARTIFACT = "beam-spark-job-server"
_MASTER_MAIN = "org.apache.spark.deploy.master.Master"
_WORKER_MAIN = "org.apache.spark.deploy.worker.Worker"
_JOB_SERVER_MAIN = "org.apache.beam.runners.spark.SparkJobServerDriver"
HOST = "127.0.0.1"
WORKER_CORES = 2
WORKER_MEMORY = "2g"
# The SDK workers a job starts stay for the job's next stages instead of starting (and
# importing TensorFlow) again for each: three times faster on the conversion test.
ENVIRONMENT_CACHE_MILLIS = 60_000
# Spark's launcher adds these on Java 17+ for the driver (its JavaModuleOptions); the job
# server is the driver, and is started without Spark's launcher.
JAVA_MODULE_OPTIONS = (
    "-XX:+IgnoreUnrecognizedVMOptions",
    *(
        f"--add-opens=java.base/{package}=ALL-UNNAMED"
        for package in (
            "java.lang",
            "java.lang.invoke",
            "java.lang.reflect",
            "java.io",
            "java.net",
            "java.nio",
            "java.util",
            "java.util.concurrent",
            "java.util.concurrent.atomic",
            "jdk.internal.ref",
            "sun.nio.ch",
            "sun.nio.cs",
            "sun.security.action",
            "sun.util.calendar",
        )
    ),
    "--add-opens=java.security.jgss/sun.security.krb5=ALL-UNNAMED",
)


@dataclass(frozen=True, kw_only=True)
class SparkCluster(processes.LocalCluster):
    """Where a running cluster listens, and the Beam arguments that use it."""

    master_port: int
    master_ui_port: int

    @property
    def master_url(self) -> str:
        return f"spark://{HOST}:{self.master_port}"

    @property
    def job_endpoint(self) -> str:
        return f"{HOST}:{self.job_port}"

    def status(self) -> dict:
        """The master's JSON status: its workers (state, cores, memory) and applications."""
        url = f"http://{HOST}:{self.master_ui_port}/json/"
        with urllib.request.urlopen(url, timeout=5) as response:
            return json.loads(response.read())

    def beam_args(self) -> list[str]:
        """Beam arguments that run a pipeline on this cluster, its Python stages on the pool."""
        return [
            *processes.portable_beam_args(self.job_endpoint, f"{HOST}:{self.worker_pool_port}"),
            f"--environment_cache_millis={ENVIRONMENT_CACHE_MILLIS}",
        ]


def spark_home() -> str:
    """The Spark distribution's folder (jars/, bin/spark-class) from PyPI's pyspark.

    Raises:
      MissingArtifact: not fetched.
    """
    return artifacts.artifact_dir(
        SPARK_ARTIFACT, SPARK_VERSION, f"the Spark {SPARK_VERSION} jars (PyPI's pyspark)"
    )


def job_server_lib() -> str:
    """The folder of the job server's jars: Beam's Spark runner and its dependencies.

    Raises:
      MissingArtifact: not fetched.
    """
    path = artifacts.artifact_dir(
        JOB_SERVER_ARTIFACT,
        BEAM_RUNNER_VERSION,
        f"the jars of Beam's Spark job server ({JOB_SERVER_COORDINATES})",
    )
    return os.path.join(path, "lib")


def _ready(cluster: SparkCluster) -> bool:
    try:
        workers = cluster.status().get("workers", [])
    except OSError:
        return False
    alive = [w for w in workers if w.get("state") == "ALIVE"]
    return (
        len(alive) == 1
        and alive[0].get("cores") == WORKER_CORES
        and processes.accepts_connections(HOST, cluster.job_port)
    )


@contextlib.contextmanager
def spark_cluster(work_dir: str) -> Iterator[SparkCluster]:
    """Starts the master, the worker, the job server and the worker pool; stops them all
    when the block is left.

    Args:
      work_dir: logs (logs/) and the worker's application folders (worker/) go here.

    Raises:
      MissingArtifact: the Spark jars, the job server's jars or Java are not installed.
      ServerFailed: a process ended, or the cluster was not ready in time.
    """
    home = spark_home()
    lib = job_server_lib()
    cluster = SparkCluster(
        master_port=processes.free_port(HOST),
        master_ui_port=processes.free_port(HOST),
        job_port=processes.free_port(HOST),
        worker_pool_port=processes.free_port(HOST),
    )
    log_dir = os.path.join(work_dir, "logs")
    worker_dir = os.path.join(work_dir, "worker")
    os.makedirs(worker_dir, exist_ok=True)
    with contextlib.ExitStack() as stack:
        stack.callback(_remove_staged_jars, worker_dir)
        supervisor = stack.enter_context(processes.supervised(log_dir))
        cluster = replace(cluster, supervisor=supervisor)
        env = _spark_env(home, log_dir, worker_dir)
        _start_spark(supervisor, cluster, home, env)
        supervisor.start(
            "job-server",
            processes.job_server_command(
                # Spark's jars first: where both ship a library, the cluster's version wins.
                f"{os.path.join(home, 'jars', '*')}:{os.path.join(lib, '*')}",
                _JOB_SERVER_MAIN,
                f"--spark-master-url={cluster.master_url}",
                cluster.job_port,
                HOST,
                JAVA_MODULE_OPTIONS,
            ),
            env,
        )
        processes.start_worker_pool(supervisor, cluster.worker_pool_port)
        supervisor.wait_until(
            lambda: _ready(cluster), "the Spark cluster", processes.STARTUP_TIMEOUT_SECONDS
        )
        yield cluster


def _spark_env(home: str, log_dir: str, worker_dir: str) -> dict[str, str]:
    """The environment of Spark's master, worker and job server (its driver)."""
    return {
        **os.environ,
        "SPARK_HOME": home,
        # The host name may not resolve (a chroot, a container): every address is HOST.
        "SPARK_LOCAL_IP": HOST,
        "SPARK_LOCAL_HOSTNAME": HOST,
        "SPARK_LOG_DIR": log_dir,
        "SPARK_WORKER_DIR": worker_dir,
    }


def _start_spark(
    supervisor: processes.Supervisor, cluster: SparkCluster, home: str, env: dict[str, str]
) -> None:
    """Starts Spark's master and its one worker, through Spark's own launcher."""
    spark_class = os.path.join(home, "bin", "spark-class")
    supervisor.start(
        "master",
        [
            spark_class,
            _MASTER_MAIN,
            # Spark's own parser: "--option value", never "--option=value".
            *("--host", HOST),
            *("--port", str(cluster.master_port)),
            *("--webui-port", str(cluster.master_ui_port)),
        ],
        env,
    )
    supervisor.start(
        "worker",
        [
            spark_class,
            _WORKER_MAIN,
            *("--host", HOST),
            *("--cores", str(WORKER_CORES)),
            *("--memory", WORKER_MEMORY),
            *("--webui-port", str(processes.free_port(HOST))),
            cluster.master_url,
        ],
        env,
    )


def _remove_staged_jars(worker_dir: str) -> None:
    """Each job stages the job server's classpath (about 400 MB) into the worker's
    application folder; the executors' logs beside the jars stay."""
    for jar in glob.glob(os.path.join(worker_dir, "*", "*", "*.jar")):
        os.remove(jar)


def _print_fetch_plan() -> None:
    """For bin/fetch-engines: the cache folders and what goes in them, as shell words."""
    print(f"SPARK_DIR={SPARK_ARTIFACT}-{SPARK_VERSION}")
    print(f"PYSPARK_REQUIREMENT='pyspark=={SPARK_VERSION} --hash=sha256:{PYSPARK_SHA256}'")
    print(f"SPARK_JOB_SERVER_DIR={JOB_SERVER_ARTIFACT}-{BEAM_RUNNER_VERSION}")


if __name__ == "__main__":
    if sys.argv[1:] == ["pom"]:
        # Spark itself, a `provided` dependency of the runner, comes from pyspark's jars.
        print(artifacts.maven_pom((JOB_SERVER_COORDINATES,)), end="")
    else:
        _print_fetch_plan()
