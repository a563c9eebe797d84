"""The workers of a training on several workers as a job of the Trainer's own cluster
(trainer.workers > 1 in a compiled Kubeflow package; choice.KUBERNETES): a TFJob
(kubernetes_tfjob.py) or a JobSet (kubernetes_jobset.py), as trainer.launcher says.

The Trainer's step reads its own pod (choice.POD_NAME_ENV, POD_NAMESPACE_ENV), creates
the job made from it, labelled with the Kueue queue the package names
(common.runtime.kueue), and waits for it (what does not depend on the kind,
kubernetes_replicas.ReplicaPods):
- while Kueue holds the job suspended, it is queued, not failing: the step says so at
  once and every QUEUED_REPORT_S, with no bound; the replicas' start timeout counts from
  the job's admission;
- it streams the chief's (worker 0's) log into its own, as worker processes do;
- all replicas exit 0 (the job's success): the training is done and the chief has
  exported into the job's folder;
- a replica fails (its pod Failed, or the job's failure): one line naming the replica,
  how it ended and its last error, and nothing is exported;
- Kueue suspends the job again once it runs (preemption): its pods are gone, the chief's
  log is no longer followed, and it is queued again; readmitted, it starts anew and the
  launcher follows the new pods.
Either way, each replica's log is kept in the model_run artifact (workers/worker-<i>.log)
and the job is deleted, with its pods. The step's pod also owns the job, so Kubernetes
deletes it should the Trainer be killed before it can.

The workers share the job's folder, their data and the backups through the pipeline
root, so every path they use must be on an object store or on a volume claim the step
mounts (`check_shared`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import sys
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from imgpipe.components.common.runtime import kueue
from imgpipe.components.trainer import config
from imgpipe.components.trainer.several_workers import (
    choice,
    cluster,
    kubernetes_jobset,
    kubernetes_replicas,
    kubernetes_tfjob,
    replicas,
    step_pod,
)

# The kinds of job, by the trainer.launcher that names them.
KINDS: dict[str, kubernetes_replicas.JobKind] = {
    config.TFJOB_LAUNCHER: kubernetes_tfjob.TFJOB,
    config.JOBSET_LAUNCHER: kubernetes_jobset.JOBSET,
}
# The API calls the Trainer makes with either kind, as RBAC rules (api group, resource)
# -> verbs: the Role of k8s/rbac.yaml grants these and no more.
API_RULES: dict[tuple[str, str], frozenset[str]] = {
    **{(k.group, k.plural): frozenset({"create", "get", "delete"}) for k in KINDS.values()},
    ("", "pods"): frozenset({"get", "list"}),
    ("", "pods/log"): frozenset({"get"}),
}
# How often the step says its job is still queued.
QUEUED_REPORT_S = 60.0


def check_shared(paths: Iterable[str], mounts: Mapping[str, str], workers_count: int) -> None:
    """Raises KubernetesUnavailable naming the first path the job's pods cannot see: one
    that is neither on an object store nor under a claim the step mounts (`mounts`,
    step_pod.shared_mounts)."""
    path = replicas.unshared_path(paths, mounts)
    if path is not None:
        raise kubernetes_replicas.KubernetesUnavailable(
            f"trainer.workers={workers_count}: {path} is on the Trainer pod's own disk, "
            "which the workers' pods cannot see; put pipeline_root (and data_root) on "
            "an object store (s3://, gs://) with kubeflow.artifact_io direct or auto, or "
            "on the claim kubeflow.pvc_name mounts"
        )


def api_client():
    """A client of the cluster the Trainer's pod runs in.

    Raises:
      KubernetesUnavailable: not in a pod of a cluster, naming the fix.
    """
    import kubernetes  # type: ignore[import-untyped]

    try:
        kubernetes.config.load_incluster_config()
    except kubernetes.config.ConfigException as e:
        raise kubernetes_replicas.KubernetesUnavailable(
            f"{choice.LAUNCHER_ENV}={choice.KUBERNETES} creates a TFJob or a JobSet from the "
            f"Trainer's pod, and this process is not in a Kubernetes pod ({e}); run the "
            "compiled package on Kubeflow, or set trainer.workers=1 (or leave "
            f"{choice.LAUNCHER_ENV} unset to train with worker processes here)"
        ) from None
    return kubernetes.client.ApiClient()


def kind_of(launcher: str) -> kubernetes_replicas.JobKind:
    """The kind of job trainer.launcher `launcher` names.

    Raises:
      ValueError: no kind, in one line naming the choices.
    """
    if launcher not in KINDS:
        raise ValueError(
            f"trainer.launcher {launcher!r} is unknown; choose one of {', '.join(KINDS)}"
        )
    return KINDS[launcher]


@dataclasses.dataclass
class _Admission:
    """Where the job stands with Kueue, as the launcher has seen it."""

    # When the job was seen admitted (not suspended); None while it is queued.
    admitted: float | None = None
    # When it was first seen queued, since its last admission.
    queued_since: float | None = None
    reported: float = -math.inf
    # Whether every replica has started since the last admission.
    started: bool = False
    # The uids of pods seen while the job was suspended: a preempted run's.
    stale: set[str] = dataclasses.field(default_factory=set)


class KubernetesJobs(kubernetes_replicas.ReplicaPods):
    """Runs a job's workers as a TFJob or a JobSet (launchers.Launcher)."""

    def __init__(
        self,
        launcher: str = config.TFJOB_LAUNCHER,
        client_factory: Callable[[], Any] = api_client,
        poll_seconds: float = kubernetes_replicas.POLL_SECONDS,
        start_timeout_s: float = kubernetes_replicas.START_TIMEOUT_S,
        api_outage_s: float = kubernetes_replicas.API_OUTAGE_S,
        queued_report_s: float = QUEUED_REPORT_S,
    ):
        super().__init__(
            kind_of(launcher), client_factory, poll_seconds, start_timeout_s, api_outage_s
        )
        self._queued_report_s = queued_report_s

    def run(
        self,
        job: object,
        workers_count: int,
        folder: str,
        log_dir: str,
        shared_paths: Iterable[str] = (),
    ) -> None:
        """Runs `job` on a job of `workers_count` replicas; returns once all have
        finished.

        Args:
          folder: the job's folder, where every replica reads the job.
          log_dir: where each replica's log is kept.
          shared_paths: the other paths the replicas read or write.

        Raises:
          KubernetesUnavailable: the job cannot be created here (one line, the fix).
          ValueError: a replica refused a setting (its one line).
          WorkersFailed: a replica failed (its one line); the job was deleted.
        """
        pod = self.step_pod()
        check_shared([folder, log_dir, *shared_paths], step_pod.shared_mounts(pod), workers_count)
        self._queue = kueue.queue_from_env()
        body = kueue.with_queue(self._kind.manifest(pod, workers_count, folder), self._queue)
        name, namespace = body["metadata"]["name"], body["metadata"]["namespace"]
        self._where = f"{self._kind.kind} {namespace}/{name}"
        replicas.save_job(folder, job)
        self._create(body, namespace)
        print(
            f"Trainer: {self._where} of {workers_count} workers (logs: {log_dir})",
            file=sys.stderr,
            flush=True,
        )
        self._chief_log: replicas.LogFollower | None = None
        try:
            self._wait(name, namespace, workers_count, log_dir)
        finally:
            self._stop_chief_log()
            self._keep_logs(name, namespace, log_dir)
            self._delete(name, namespace)

    def _custom_args(self, namespace: str) -> tuple[str, str, str, str]:
        return (self._kind.group, self._kind.version, namespace, self._kind.plural)

    def _create(self, body: dict[str, Any], namespace: str) -> None:
        import kubernetes

        try:
            self._custom.create_namespaced_custom_object(*self._custom_args(namespace), body)
        except kubernetes.client.ApiException as e:
            if e.status == 404:
                raise kubernetes_replicas.KubernetesUnavailable(
                    f"cannot create {self._where}: this cluster has no {self._kind.kind} "
                    f"resource ({self._kind.group}/{self._kind.version}); {self._kind.missing}"
                ) from None
            raise kubernetes_replicas.api_error(
                e, f"create {self._where}", f"create {self._kind.plural}"
            ) from None

    def _delete(self, name: str, namespace: str) -> None:
        import kubernetes

        with contextlib.suppress(kubernetes.client.ApiException):
            self._custom.delete_namespaced_custom_object(
                *self._custom_args(namespace),
                name,
                body=kubernetes.client.V1DeleteOptions(propagation_policy="Background"),
            )

    def _wait(self, name: str, namespace: str, workers_count: int, log_dir: str) -> None:
        api_errors = kubernetes_replicas.api_errors()
        admission = _Admission()
        answered = time.monotonic()
        while True:
            try:
                pods = self._pods(name, namespace)
                state = self._custom.get_namespaced_custom_object(
                    *self._custom_args(namespace), name
                )
            except api_errors as e:
                if time.monotonic() - answered > self._api_outage_s:
                    raise replicas.WorkersFailed(
                        f"the Kubernetes API has not answered the Trainer about "
                        f"{self._where} for {self._api_outage_s:.0f} s "
                        f"({kubernetes_replicas.short(e)}); nothing was exported; a rerun "
                        "resumes from the last preemption backup"
                    ) from None
                time.sleep(self._poll_seconds)
                continue
            answered = now = time.monotonic()
            # Before the pods: those a suspension kills may show Failed.
            if self._kind.suspended(state):
                self._queued(admission, pods, now)
            elif self._running(admission, state, pods, namespace, workers_count, log_dir, now):
                return
            time.sleep(self._poll_seconds)

    def _queued(self, admission: _Admission, pods: list[dict[str, Any]], now: float) -> None:
        """The job is suspended: queued (again, when it was running: preempted)."""
        admission.stale.update(p["metadata"].get("uid") or "" for p in pods)
        if admission.admitted is not None:
            self._stop_chief_log()
            self._say(
                f"{self._where} was suspended again by Kueue (preempted) after its "
                "admission; its workers stopped, and it runs again once readmitted"
            )
            admission.admitted, admission.started = None, False
        if admission.queued_since is None:
            admission.queued_since, admission.reported = now, -math.inf
        if now - admission.reported < self._queued_report_s:
            return
        admission.reported = now
        waited = now - admission.queued_since
        if self._queue is not None:
            self._say(f"{self._where} is queued in {self._queue} (Kueue) for {waited:.0f} s")
        else:
            self._say(
                f"{self._where} is suspended for {waited:.0f} s and names no Kueue queue: "
                "set kubeflow.queue_name to a LocalQueue of its namespace (Kueue's "
                "manageJobsWithoutQueueName holds a job without one)"
            )

    def _running(
        self,
        admission: _Admission,
        state: Mapping[str, Any],
        pods: list[dict[str, Any]],
        namespace: str,
        workers_count: int,
        log_dir: str,
        now: float,
    ) -> bool:
        """Follows the admitted job; True once it has succeeded.

        Raises:
          WorkersFailed: a replica failed, or has not started START_TIMEOUT_S after the
            job's admission, or the job failed.
        """
        phase = kubernetes_replicas.phase
        if admission.admitted is None:
            if admission.queued_since is not None:
                self._say(f"{self._where} was admitted after {now - admission.queued_since:.0f} s")
            admission.admitted, admission.queued_since = now, None
        found = self._replicas(pods, admission.stale)
        chief = found.get(cluster.CHIEF)
        if chief is not None and phase(chief) in ("Running", "Succeeded", "Failed"):
            self._chief_log = self._chief_log or self._follow(chief, namespace)
        failed = sorted(i for i, p in found.items() if phase(p) == "Failed")
        if failed:
            self._fail(failed[0], found[failed[0]], namespace, workers_count, log_dir)
        admission.started = admission.started or (
            len(found) >= workers_count and all(phase(p) != "Pending" for p in found.values())
        )
        if not admission.started:
            self._check_starting(found, workers_count, now - admission.admitted, log_dir)
        ended = self._kind.ended(state)
        if ended is None:
            return False
        succeeded, message = ended
        if succeeded:
            if self._chief_log is not None:
                self._chief_log.finish()
            return True
        raise replicas.WorkersFailed(
            f"{self._where} failed: {message}; nothing was exported (logs: {log_dir}); a "
            "rerun resumes from the last preemption backup"
        )

    def _stop_chief_log(self) -> None:
        if self._chief_log is not None:
            self._chief_log.stop()
            self._chief_log = None

    def _say(self, line: str) -> None:
        print(f"Trainer: {line}", file=sys.stderr, flush=True)
