"""The workers of a training on several workers as a TFJob of the Trainer's own cluster
(trainer.workers > 1 in a compiled Kubeflow package; choice.KUBERNETES).

The Trainer's step reads its own pod (choice.POD_NAME_ENV, POD_NAMESPACE_ENV), creates
the TFJob made from it (tfjob_manifest.manifest) and waits for it (what does not depend
on the TFJob, kubernetes_replicas.ReplicaPods):
- it streams the chief's (worker 0's) log into its own, as worker processes do;
- all replicas exit 0 (the TFJob's Succeeded condition): the training is done and the
  chief has exported into the job's folder;
- a replica fails (its pod Failed, or the TFJob's Failed condition): one line naming
  the replica, how it ended and its last error, and nothing is exported.
Either way, each replica's log is kept in the model_run artifact (workers/worker-<i>.log)
and the TFJob is deleted, with its pods. The step's pod also owns the TFJob, so
Kubernetes deletes it should the Trainer be killed before it can.

The workers share the job's folder, their data and the backups through the pipeline
root, so every path they use must be on an object store or on a volume claim the step
mounts (`check_shared`).
"""

from __future__ import annotations

import contextlib
import sys
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from imgpipe.components.trainer.several_workers import (
    choice,
    cluster,
    kubernetes_replicas,
    replicas,
    step_pod,
    tfjob_manifest,
)

# The API calls the Trainer makes, as RBAC rules (api group, resource) -> verbs: the
# Role of k8s/rbac.yaml grants these and no more.
API_RULES: dict[tuple[str, str], frozenset[str]] = {
    (tfjob_manifest.GROUP, tfjob_manifest.PLURAL): frozenset({"create", "get", "delete"}),
    ("", "pods"): frozenset({"get", "list"}),
    ("", "pods/log"): frozenset({"get"}),
}


def check_shared(paths: Iterable[str], mounts: Mapping[str, str], workers_count: int) -> None:
    """Raises KubernetesUnavailable naming the first path the TFJob's pods cannot see:
    one that is neither on an object store nor under a claim the step mounts
    (`mounts`, step_pod.shared_mounts)."""
    path = replicas.unshared_path(paths, mounts)
    if path is not None:
        raise kubernetes_replicas.KubernetesUnavailable(
            f"trainer.workers={workers_count}: {path} is on the Trainer pod's own disk, "
            "which the TFJob's workers cannot see; put pipeline_root (and data_root) on "
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
            f"{choice.LAUNCHER_ENV}={choice.KUBERNETES} creates a TFJob from the Trainer's "
            f"pod, and this process is not in a Kubernetes pod ({e}); run the compiled "
            "package on Kubeflow, or set trainer.workers=1 (or leave "
            f"{choice.LAUNCHER_ENV} unset to train with worker processes here)"
        ) from None
    return kubernetes.client.ApiClient()


class KubernetesWorkers(kubernetes_replicas.ReplicaPods):
    """Runs a job's workers as a TFJob (launchers.Launcher)."""

    KIND = tfjob_manifest.KIND
    CONTAINER = tfjob_manifest.CONTAINER
    NO_POD = (
        "the Training Operator has made no pod for it (is the operator running in "
        "this cluster? kubectl -n kubeflow get deploy training-operator)"
    )

    def __init__(
        self,
        client_factory: Callable[[], Any] = api_client,
        poll_seconds: float = kubernetes_replicas.POLL_SECONDS,
        start_timeout_s: float = kubernetes_replicas.START_TIMEOUT_S,
        api_outage_s: float = kubernetes_replicas.API_OUTAGE_S,
    ):
        super().__init__(client_factory, poll_seconds, start_timeout_s, api_outage_s)

    def run(
        self,
        job: object,
        workers_count: int,
        folder: str,
        log_dir: str,
        shared_paths: Iterable[str] = (),
    ) -> None:
        """Runs `job` on a TFJob of `workers_count` replicas; returns once all have
        finished.

        Args:
          folder: the job's folder, where every replica reads the job.
          log_dir: where each replica's log is kept.
          shared_paths: the other paths the replicas read or write.

        Raises:
          KubernetesUnavailable: the TFJob cannot be created here (one line, the fix).
          ValueError: a replica refused a setting (its one line).
          WorkersFailed: a replica failed (its one line); the TFJob was deleted.
        """
        pod = self.step_pod()
        check_shared([folder, log_dir, *shared_paths], step_pod.shared_mounts(pod), workers_count)
        body = tfjob_manifest.manifest(pod, workers_count, folder)
        name, namespace = body["metadata"]["name"], body["metadata"]["namespace"]
        replicas.save_job(folder, job)
        import kubernetes

        try:
            self._custom.create_namespaced_custom_object(
                tfjob_manifest.GROUP, tfjob_manifest.VERSION, namespace, tfjob_manifest.PLURAL, body
            )
        except kubernetes.client.ApiException as e:
            raise _api_error(e, f"create TFJob {namespace}/{name}", "create tfjobs") from None
        print(
            f"Trainer: TFJob {namespace}/{name} of {workers_count} workers (logs: {log_dir})",
            file=sys.stderr,
            flush=True,
        )
        self._chief_log: replicas.LogFollower | None = None
        try:
            self._wait(name, namespace, workers_count, log_dir)
        finally:
            if self._chief_log is not None:
                self._chief_log.stop()
            self._keep_logs(name, namespace, log_dir)
            with contextlib.suppress(kubernetes.client.ApiException):
                self._custom.delete_namespaced_custom_object(
                    tfjob_manifest.GROUP,
                    tfjob_manifest.VERSION,
                    namespace,
                    tfjob_manifest.PLURAL,
                    name,
                    body=kubernetes.client.V1DeleteOptions(propagation_policy="Background"),
                )

    def _wait(self, name, namespace, workers_count, log_dir) -> None:
        api_errors = kubernetes_replicas.api_errors()
        phase, short = kubernetes_replicas.phase, kubernetes_replicas.short
        created = answered = time.monotonic()
        started = False
        while True:
            try:
                pods = self._replicas(name, namespace)
                state = self._custom.get_namespaced_custom_object(
                    tfjob_manifest.GROUP,
                    tfjob_manifest.VERSION,
                    namespace,
                    tfjob_manifest.PLURAL,
                    name,
                )
            except api_errors as e:
                if time.monotonic() - answered > self._api_outage_s:
                    raise replicas.WorkersFailed(
                        f"the Kubernetes API has not answered the Trainer about TFJob "
                        f"{namespace}/{name} for {self._api_outage_s:.0f} s "
                        f"({short(e)}); nothing was exported; a rerun resumes from the "
                        "last preemption backup"
                    ) from None
                time.sleep(self._poll_seconds)
                continue
            answered = time.monotonic()
            chief = pods.get(cluster.CHIEF)
            if chief is not None and phase(chief) in ("Running", "Succeeded", "Failed"):
                self._chief_log = self._chief_log or self._follow(chief, namespace)
            failed = sorted(i for i, p in pods.items() if phase(p) == "Failed")
            if failed:
                self._fail(failed[0], pods[failed[0]], namespace, workers_count, log_dir)
            started = started or (
                len(pods) >= workers_count and all(phase(p) != "Pending" for p in pods.values())
            )
            if not started:
                self._check_starting(pods, workers_count, time.monotonic() - created, log_dir)
            conditions = {
                c["type"]: c
                for c in (state.get("status") or {}).get("conditions") or []
                if c.get("status") == "True"
            }
            if "Succeeded" in conditions:
                if self._chief_log is not None:
                    self._chief_log.finish()
                return
            if "Failed" in conditions:
                raise replicas.WorkersFailed(
                    f"TFJob {namespace}/{name} failed: "
                    f"{' '.join(str(conditions['Failed'].get('message', '')).split())}; "
                    f"nothing was exported (logs: {log_dir}); a rerun resumes from the last "
                    "preemption backup"
                )
            time.sleep(self._poll_seconds)

    def _replicas(self, name: str, namespace: str) -> dict[int, dict[str, Any]]:
        pods = self._core.list_namespaced_pod(
            namespace, label_selector=f"{tfjob_manifest.JOB_NAME_LABEL}={name}"
        )
        found = {}
        for pod in self._api.sanitize_for_serialization(pods)["items"]:
            labels = pod["metadata"].get("labels") or {}
            if (
                labels.get(tfjob_manifest.REPLICA_TYPE_LABEL, "").lower()
                == tfjob_manifest.REPLICA_TYPE.lower()
            ):
                found[int(labels[tfjob_manifest.REPLICA_INDEX_LABEL])] = pod
        return found


def _api_error(error, doing: str, verbs: str) -> kubernetes_replicas.KubernetesUnavailable:
    """One line for an API refusal: what was refused, and the fix (a cluster without the
    TFJob resource too)."""
    if error.status == 404 and "tfjob" in doing.lower():
        return kubernetes_replicas.KubernetesUnavailable(
            f"cannot {doing}: this cluster has no TFJob resource (kubeflow.org/v1); install "
            "the Kubeflow Training Operator v1.9, or set trainer.workers=1"
        )
    return kubernetes_replicas.api_error(error, doing, verbs)
