"""A Flink session cluster on this machine: a JobManager and a TaskManager with two slots,
separate JVMs, from the Flink jars in the artifact cache, plus the Beam SDK worker pool
that Beam's portable Flink runner hands its Python stages to.

The worker pool is the EXTERNAL environment of the Flink-on-Kubernetes sidecar pattern
(k8s/flink-deployment.yaml): a `worker_pool_main` process beside the TaskManager, which
starts one SDK worker per request. Everything a cluster writes (configuration, logs,
Flink's temporary folders) is under its work folder; `flink_cluster()` stops the
processes when its block is left, however it is left.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, replace

from imgpipe.pipelines.engines import artifacts, processes

# Beam's Flink runner (the Java side that turns a portable pipeline into a Flink job)
# must match the cluster's Flink minor version. Maven Central serves no Flink runner or
# job server of Beam 2.77 (nor of 2.70-2.76) to this project's machines; 2.62.0, for
# Flink 1.19, is the newest served, and it runs Beam 2.77's Python pipelines (the
# portable API between them is versioned: tests/test_flink_beam.py runs them).
FLINK_VERSION = "1.19.1"
FLINK_MINOR = FLINK_VERSION.rsplit(".", 1)[0]
BEAM_RUNNER_VERSION = "2.62.0"
# Cache folders, as bin/fetch-engines names them.
FLINK_ARTIFACT = "flink"
JOB_SERVER_ARTIFACT = "beam-flink-job-server"
JOB_SERVER_COORDINATES = f"org.apache.beam:beam-runners-flink-{FLINK_MINOR}:{BEAM_RUNNER_VERSION}"
_JOB_SERVER_MAIN = "org.apache.beam.runners.flink.FlinkJobServerDriver"
SLOTS = 2
# The TaskManager's memory, here and in k8s/flink-deployment.yaml.
JOBMANAGER_PROCESS_SIZE = "1024m"
TASKMANAGER_PROCESS_SIZE = "4096m"
TASKMANAGER_MEMORY = {
    # TFDV's statistics pipeline has many shuffles; each needs network buffers per
    # channel, more than Flink's default share (10%) gives.
    "taskmanager.memory.network.min": "640m",
    "taskmanager.memory.network.max": "640m",
    # Beam's data plane to the SDK workers (gRPC on Netty) allocates direct memory
    # outside Flink's network buffers; with none budgeted, a 30,000-image conversion
    # failed with "OutOfMemoryError: Direct buffer memory" (benchmarks/scale.py).
    "taskmanager.memory.task.off-heap.size": "512m",
    # Flink's default gives 40% to managed memory (its sorts and joins), which left the
    # task heap 102 MB of a 3 GB TaskManager: a 300,000-image conversion ran out of heap.
    # Beam's batch GroupByKeys sort in 512 MB; the task heap gets 1.6 GB.
    "taskmanager.memory.managed.size": "512m",
}
# The worker pool's port in `imgpipe engine flink` and in the sidecar of
# k8s/flink-deployment.yaml.
WORKER_POOL_PORT = 50000
HOST = "localhost"
# Flink's own start-up scripts pass these on Java 17+ (its config.yaml's env.java.opts.all).
JAVA_MODULE_OPTIONS = (
    "--add-exports=java.base/sun.net.util=ALL-UNNAMED",
    "--add-exports=java.rmi/sun.rmi.registry=ALL-UNNAMED",
    "--add-exports=java.security.jgss/sun.security.krb5=ALL-UNNAMED",
    *(
        f"--add-opens=java.base/{package}=ALL-UNNAMED"
        for package in (
            "java.lang",
            "java.net",
            "java.io",
            "java.nio",
            "sun.nio.ch",
            "java.lang.reflect",
            "java.text",
            "java.time",
            "java.util",
            "java.util.concurrent",
            "java.util.concurrent.atomic",
            "java.util.concurrent.locks",
        )
    ),
)
_JOBMANAGER_MAIN = "org.apache.flink.runtime.entrypoint.StandaloneSessionClusterEntrypoint"
_TASKMANAGER_MAIN = "org.apache.flink.runtime.taskexecutor.TaskManagerRunner"
_MEMORY_MAIN = "org.apache.flink.runtime.util.bash.BashJavaUtils"
_MEMORY_RESULT = "BASH_JAVA_UTILS_EXEC_RESULT:"
_LOG4J_PROPERTIES = """\
rootLogger.level = INFO
rootLogger.appenderRef.file.ref = MainAppender
appender.main.name = MainAppender
appender.main.type = File
appender.main.fileName = ${sys:log.file}
appender.main.layout.type = PatternLayout
appender.main.layout.pattern = %d{yyyy-MM-dd HH:mm:ss,SSS} %-5p %-60c %x - %m%n
"""


@dataclass(frozen=True, kw_only=True)
class FlinkCluster(processes.LocalCluster):
    """A running cluster: where Beam submits, and where its SDK workers come from."""

    rest_port: int
    parallelism: int = SLOTS

    @property
    def master(self) -> str:
        """Beam's --flink_master: the JobManager's REST address."""
        return f"{HOST}:{self.rest_port}"

    @property
    def rest_url(self) -> str:
        return f"http://{HOST}:{self.rest_port}"

    def overview(self) -> dict:
        """The JobManager's /overview: TaskManagers, slots, jobs by state."""
        with urllib.request.urlopen(f"{self.rest_url}/overview", timeout=5) as response:
            return json.loads(response.read())

    def beam_args(self) -> list[str]:
        """Beam arguments that run a pipeline on this cluster, its Python stages on the pool."""
        return [
            *processes.portable_beam_args(
                f"{HOST}:{self.job_port}", f"{HOST}:{self.worker_pool_port}"
            ),
            f"--parallelism={self.parallelism}",
        ]


def flink_lib() -> str:
    """The folder of the cluster's jars (flink-runtime and its dependencies, log4j).

    Raises:
      MissingArtifact: not fetched.
    """
    path = artifacts.artifact_dir(
        FLINK_ARTIFACT, FLINK_VERSION, f"the Flink {FLINK_VERSION} cluster jars"
    )
    return os.path.join(path, "lib")


def job_server_lib() -> str:
    """The folder of Beam's Flink job server's jars (Beam's Flink runner and its dependencies).

    Raises:
      MissingArtifact: not fetched.
    """
    path = artifacts.artifact_dir(
        JOB_SERVER_ARTIFACT,
        f"{FLINK_MINOR}-{BEAM_RUNNER_VERSION}",
        f"the jars of Beam's Flink job server ({JOB_SERVER_COORDINATES})",
    )
    return os.path.join(path, "lib")


def write_config(conf_dir: str, work_dir: str, rest_port: int, rpc_port: int) -> None:
    """Flink's config.yaml (flat keys) and log4j settings for one cluster in `work_dir`."""
    os.makedirs(conf_dir, exist_ok=True)
    tmp_dir = os.path.join(work_dir, "tmp")
    os.makedirs(tmp_dir, exist_ok=True)
    settings = {
        "jobmanager.rpc.address": HOST,
        "jobmanager.rpc.port": rpc_port,
        "jobmanager.bind-host": HOST,
        "jobmanager.memory.process.size": JOBMANAGER_PROCESS_SIZE,
        "rest.address": HOST,
        "rest.bind-address": HOST,
        "rest.port": rest_port,
        "taskmanager.host": HOST,
        "taskmanager.bind-host": HOST,
        # Else the TaskManager names itself after the host name, which a chroot or a
        # container may not resolve.
        "taskmanager.resource-id": "imgpipe-taskmanager-1",
        "taskmanager.numberOfTaskSlots": SLOTS,
        "taskmanager.memory.process.size": TASKMANAGER_PROCESS_SIZE,
        **TASKMANAGER_MEMORY,
        "parallelism.default": SLOTS,
        "io.tmp.dirs": tmp_dir,
        "web.tmpdir": tmp_dir,
        "blob.storage.directory": tmp_dir,
    }
    with open(os.path.join(conf_dir, "config.yaml"), "w") as f:
        f.writelines(f"{key}: {value}\n" for key, value in settings.items())
    with open(os.path.join(conf_dir, "log4j.properties"), "w") as f:
        f.write(_LOG4J_PROPERTIES)


def memory_arguments(lib: str, conf_dir: str, role: str) -> tuple[list[str], list[str]]:
    """(JVM options, -D properties) for a JobManager ("JM") or TaskManager ("TM").

    Flink's start-up scripts get them from the same call: its memory model turns the
    process sizes in config.yaml into heap, direct and metaspace limits.
    """
    out = subprocess.run(
        [
            artifacts.java(),
            "-cp",
            os.path.join(lib, "*"),
            _MEMORY_MAIN,
            f"GET_{role}_RESOURCE_PARAMS",
            "--configDir",
            conf_dir,
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    results = [
        line[len(_MEMORY_RESULT) :] for line in out.splitlines() if line.startswith(_MEMORY_RESULT)
    ]
    if len(results) != 2:
        raise processes.ServerFailed(f"Flink's memory calculation for the {role} said:\n{out}")
    return results[0].split(), results[1].split()


def _java_command(lib: str, conf_dir: str, log_file: str, role: str, main: str) -> list[str]:
    jvm, properties = memory_arguments(lib, conf_dir, role)
    return [
        artifacts.java(),
        *JAVA_MODULE_OPTIONS,
        *jvm,
        f"-Dlog.file={log_file}",
        f"-Dlog4j.configurationFile={os.path.join(conf_dir, 'log4j.properties')}",
        "-cp",
        os.path.join(lib, "*"),
        main,
        "--configDir",
        conf_dir,
        *properties,
    ]


def _ready(cluster: FlinkCluster) -> bool:
    try:
        overview = cluster.overview()
    except OSError:
        return False
    return overview.get("taskmanagers") == 1 and overview.get("slots-total") == SLOTS


@contextlib.contextmanager
def flink_cluster(
    work_dir: str, rest_port: int = 0, worker_pool_port: int = 0, job_port: int = 0
) -> Iterator[FlinkCluster]:
    """Starts the cluster, Beam's job server and the worker pool; stops them when the block
    is left.

    Args:
      work_dir: configuration, logs (logs/) and Flink's temporary folders go here.
      rest_port, worker_pool_port, job_port: 0 picks a free port.

    Raises:
      MissingArtifact: the Flink or Beam jars, or Java, are not installed.
      ServerFailed: a process ended, or the cluster was not ready in time.
    """
    lib = flink_lib()
    job_server = job_server_lib()
    conf_dir = os.path.join(work_dir, "conf")
    log_dir = os.path.join(work_dir, "logs")
    cluster = FlinkCluster(
        rest_port=rest_port or processes.free_port(HOST),
        worker_pool_port=worker_pool_port or processes.free_port(HOST),
        job_port=job_port or processes.free_port(HOST),
    )
    write_config(conf_dir, work_dir, cluster.rest_port, processes.free_port(HOST))
    with processes.supervised(log_dir) as supervisor:
        cluster = replace(cluster, supervisor=supervisor)
        for name, role, main in (
            ("jobmanager", "JM", _JOBMANAGER_MAIN),
            ("taskmanager", "TM", _TASKMANAGER_MAIN),
        ):
            log_file = os.path.join(log_dir, f"{name}.log")
            supervisor.start(name, _java_command(lib, conf_dir, log_file, role, main))
        processes.start_worker_pool(supervisor, cluster.worker_pool_port)
        supervisor.start(
            "job-server",
            processes.job_server_command(
                os.path.join(job_server, "*"),
                _JOB_SERVER_MAIN,
                f"--flink-master={cluster.master}",
                cluster.job_port,
                HOST,
            ),
        )
        supervisor.wait_until(
            lambda: _ready(cluster) and processes.accepts_connections(HOST, cluster.job_port),
            "the Flink cluster and Beam's job server",
            processes.STARTUP_TIMEOUT_SECONDS,
        )
        yield cluster


# What bin/fetch-engines resolves with Maven into the cache folders' lib/: the modules a
# session cluster runs (flink-dist, which bundles them, is not served by Maven Central
# here), their dependencies, and log4j with its SLF4J 2 binding; and, apart, Beam's Flink
# runner with the job service it runs (what Beam's job-server jar bundles).
CLUSTER_MAVEN_DEPENDENCIES = (
    f"org.apache.flink:flink-runtime:{FLINK_VERSION}",
    f"org.apache.flink:flink-clients:{FLINK_VERSION}",
    f"org.apache.flink:flink-streaming-java:{FLINK_VERSION}",
    f"org.apache.flink:flink-rpc-akka-loader:{FLINK_VERSION}",
    "org.apache.logging.log4j:log4j-slf4j2-impl:2.24.3",
    "org.apache.logging.log4j:log4j-core:2.24.3",
    "org.slf4j:slf4j-api:2.0.16",
)


JOB_SERVER_MAVEN_DEPENDENCIES = (
    JOB_SERVER_COORDINATES,
    f"org.apache.beam:beam-runners-java-job-service:{BEAM_RUNNER_VERSION}",
    f"org.apache.beam:beam-sdks-java-expansion-service:{BEAM_RUNNER_VERSION}",
)


def _print_fetch_plan() -> None:
    """For bin/fetch-engines: the cache folders and what goes in them, as shell words."""
    print(f"FLINK_DIR={FLINK_ARTIFACT}-{FLINK_VERSION}")
    print(f"JOB_SERVER_DIR={JOB_SERVER_ARTIFACT}-{FLINK_MINOR}-{BEAM_RUNNER_VERSION}")


if __name__ == "__main__":
    if sys.argv[1:] == ["cluster-pom"]:
        print(artifacts.maven_pom(CLUSTER_MAVEN_DEPENDENCIES), end="")
    elif sys.argv[1:] == ["job-server-pom"]:
        print(artifacts.maven_pom(JOB_SERVER_MAVEN_DEPENDENCIES), end="")
    else:
        _print_fetch_plan()
