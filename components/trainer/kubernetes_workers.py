"""The workers of a training on several workers as a TFJob of the Trainer's own cluster
(trainer.workers > 1 in a compiled Kubeflow package; launch.KUBERNETES).

The Trainer's step reads its own pod (launch.POD_NAME_ENV, POD_NAMESPACE_ENV), creates
the TFJob made from it (tfjob.manifest) and waits for it:
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
import os
import sys
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any, NoReturn

from imgpipe.components.trainer import cluster, launch, replicas, tfjob, workers

POLL_SECONDS = 2.0
# How long the replicas may take to start (scheduled, image pulled, running): a GPU node
# pool that scales up takes minutes. Past it the TFJob is deleted, naming what it waits for.
START_TIMEOUT_S = 1200.0
# How long the API server may fail to answer the Trainer's polls before the training fails.
API_OUTAGE_S = 60.0
# A replica's container waiting for one of these never starts, however long it waits.
NEVER_STARTS = frozenset({"InvalidImageName", "CreateContainerConfigError", "ErrImageNeverPull"})
# The API calls the Trainer makes, as RBAC rules (api group, resource) -> verbs: the
# Role of k8s/rbac.yaml grants these and no more.
API_RULES: dict[tuple[str, str], frozenset[str]] = {
    (tfjob.GROUP, tfjob.PLURAL): frozenset({"create", "get", "delete"}),
    ("", "pods"): frozenset({"get", "list"}),
    ("", "pods/log"): frozenset({"get"}),
}


class KubernetesUnavailable(ValueError):
    """The TFJob cannot be created here; the message is one line naming the fix."""


def check_shared(paths: Iterable[str], mounts: Mapping[str, str], workers_count: int) -> None:
    """Raises KubernetesUnavailable naming the first path the TFJob's pods cannot see:
    one that is neither on an object store nor under a claim the step mounts
    (`mounts`, tfjob.shared_mounts)."""
    path = replicas.unshared_path(paths, mounts)
    if path is not None:
        raise KubernetesUnavailable(
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
        raise KubernetesUnavailable(
            f"{launch.LAUNCHER_ENV}={launch.KUBERNETES} creates a TFJob from the Trainer's "
            f"pod, and this process is not in a Kubernetes pod ({e}); run the compiled "
            "package on Kubeflow, or set trainer.workers=1 (or leave "
            f"{launch.LAUNCHER_ENV} unset to train with worker processes here)"
        ) from None
    return kubernetes.client.ApiClient()


class KubernetesWorkers:
    """Runs a job's workers as a TFJob (workers.Launcher)."""

    shares_machine = False

    def __init__(
        self,
        client_factory: Callable[[], Any] = api_client,
        poll_seconds: float = POLL_SECONDS,
        start_timeout_s: float = START_TIMEOUT_S,
        api_outage_s: float = API_OUTAGE_S,
    ):
        self._client_factory = client_factory
        self._poll_seconds = poll_seconds
        self._start_timeout_s = start_timeout_s
        self._api_outage_s = api_outage_s

    def step_pod(self) -> dict[str, Any]:
        """The Trainer's own pod, as the API serves it (camelCase).

        Raises:
          KubernetesUnavailable: the pod's name is not known, or it cannot be read.
        """
        name = os.environ.get(launch.POD_NAME_ENV)
        namespace = os.environ.get(launch.POD_NAMESPACE_ENV)
        if not name or not namespace:
            raise KubernetesUnavailable(
                f"{launch.LAUNCHER_ENV}={launch.KUBERNETES} needs the Trainer pod's name and "
                f"namespace in {launch.POD_NAME_ENV} and {launch.POD_NAMESPACE_ENV}: "
                "compile the package again with `imgpipe kfp compile` (it asks Kubernetes "
                "for them)"
            )
        import kubernetes

        self._api = self._client_factory()
        self._core = kubernetes.client.CoreV1Api(self._api)
        self._custom = kubernetes.client.CustomObjectsApi(self._api)
        try:
            pod = self._core.read_namespaced_pod(name, namespace)
        except kubernetes.client.ApiException as e:
            raise _api_error(e, f"read its own pod {namespace}/{name}", "get pods") from None
        return self._api.sanitize_for_serialization(pod)

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
        check_shared([folder, log_dir, *shared_paths], tfjob.shared_mounts(pod), workers_count)
        body = tfjob.manifest(pod, workers_count, folder)
        name, namespace = body["metadata"]["name"], body["metadata"]["namespace"]
        workers.save_job(folder, job)
        import kubernetes

        try:
            self._custom.create_namespaced_custom_object(
                tfjob.GROUP, tfjob.VERSION, namespace, tfjob.PLURAL, body
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
                    tfjob.GROUP,
                    tfjob.VERSION,
                    namespace,
                    tfjob.PLURAL,
                    name,
                    body=kubernetes.client.V1DeleteOptions(propagation_policy="Background"),
                )

    def _wait(self, name, namespace, workers_count, log_dir) -> None:
        api_errors = _api_errors()
        created = answered = time.monotonic()
        started = False
        while True:
            try:
                pods = self._replicas(name, namespace)
                state = self._custom.get_namespaced_custom_object(
                    tfjob.GROUP, tfjob.VERSION, namespace, tfjob.PLURAL, name
                )
            except api_errors as e:
                if time.monotonic() - answered > self._api_outage_s:
                    raise workers.WorkersFailed(
                        f"the Kubernetes API has not answered the Trainer about TFJob "
                        f"{namespace}/{name} for {self._api_outage_s:.0f} s "
                        f"({_short(e)}); nothing was exported; a rerun resumes from the "
                        "last preemption backup"
                    ) from None
                time.sleep(self._poll_seconds)
                continue
            answered = time.monotonic()
            chief = pods.get(cluster.CHIEF)
            if chief is not None and _phase(chief) in ("Running", "Succeeded", "Failed"):
                self._chief_log = self._chief_log or self._follow(chief, namespace)
            failed = sorted(i for i, p in pods.items() if _phase(p) == "Failed")
            if failed:
                self._fail(failed[0], pods[failed[0]], namespace, workers_count, log_dir)
            started = started or (
                len(pods) >= workers_count and all(_phase(p) != "Pending" for p in pods.values())
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
                raise workers.WorkersFailed(
                    f"TFJob {namespace}/{name} failed: "
                    f"{' '.join(str(conditions['Failed'].get('message', '')).split())}; "
                    f"nothing was exported (logs: {log_dir}); a rerun resumes from the last "
                    "preemption backup"
                )
            time.sleep(self._poll_seconds)

    def _check_starting(self, pods, workers_count: int, waited: float, log_dir: str) -> None:
        """Fails the training for a replica that will not start: at once for one that
        never can (NEVER_STARTS), else once the replicas have waited START_TIMEOUT_S."""
        for index in range(workers_count):
            pod = pods.get(index)
            if pod is not None and _phase(pod) != "Pending":
                continue
            reason, why = _waiting_for(pod)
            if reason in NEVER_STARTS or waited > self._start_timeout_s:
                where = f" (pod {pod['metadata']['name']})" if pod is not None else ""
                raise workers.WorkersFailed(
                    f"trainer worker {index} of {workers_count}{where} has not started "
                    f"after {waited:.0f} s: {why}; the TFJob was deleted and nothing was "
                    f"exported (logs: {log_dir})"
                )

    def _replicas(self, name: str, namespace: str) -> dict[int, dict[str, Any]]:
        pods = self._core.list_namespaced_pod(
            namespace, label_selector=f"{tfjob.JOB_NAME_LABEL}={name}"
        )
        found = {}
        for pod in self._api.sanitize_for_serialization(pods)["items"]:
            labels = pod["metadata"].get("labels") or {}
            if labels.get(tfjob.REPLICA_TYPE_LABEL, "").lower() == tfjob.REPLICA_TYPE.lower():
                found[int(labels[tfjob.REPLICA_INDEX_LABEL])] = pod
        return found

    def _fail(self, index, pod, namespace, workers_count, log_dir) -> NoReturn:
        pod_name = pod["metadata"]["name"]
        workers.raise_failed(
            f"trainer worker {index} of {workers_count} (pod {namespace}/{pod_name})",
            _how_it_ended(pod),
            self._keep_log(pod_name, namespace, log_dir, index),
            workers_count,
            "the TFJob was deleted with its other workers",
            log_dir,
        )

    def _follow(self, pod: Mapping[str, Any], namespace: str) -> replicas.LogFollower:
        def open_stream() -> replicas.LogStream:
            response = self._core.read_namespaced_pod_log(
                pod["metadata"]["name"],
                namespace,
                container=tfjob.CONTAINER,
                follow=True,
                _preload_content=False,
            )
            return response.stream(4096), response.close

        follower = replicas.LogFollower(open_stream)
        follower.start()
        return follower

    def _keep_logs(self, name: str, namespace: str, log_dir: str) -> None:
        """Copies each replica's log into log_dir (what the API still has of it)."""
        with contextlib.suppress(Exception):  # the logs are a courtesy: the result stands
            for index, pod in self._replicas(name, namespace).items():
                self._keep_log(pod["metadata"]["name"], namespace, log_dir, index)

    def _keep_log(self, pod_name: str, namespace: str, log_dir: str, index: int) -> str:
        """Keeps replica `index`'s log in log_dir; returns it."""
        import kubernetes

        try:
            text = self._core.read_namespaced_pod_log(
                pod_name, namespace, container=tfjob.CONTAINER
            )
        except kubernetes.client.ApiException as e:
            text = f"(its log could not be read: {e.status} {e.reason})\n"
        return replicas.keep_log(log_dir, index, text)


def _phase(pod: Mapping[str, Any]) -> str:
    return (pod.get("status") or {}).get("phase") or "Pending"


def _waiting_for(pod: Mapping[str, Any] | None) -> tuple[str, str]:
    """Why a replica has not started: (a reason's code or "", one line saying it)."""
    if pod is None:
        return "", (
            "the Training Operator has made no pod for it (is the operator running in "
            "this cluster? kubectl -n kubeflow get deploy training-operator)"
        )
    status = pod.get("status") or {}
    for container in status.get("containerStatuses") or []:
        waiting = (container.get("state") or {}).get("waiting")
        if waiting and waiting.get("reason"):
            message = " ".join(str(waiting.get("message", "")).split())
            return waiting["reason"], f"its container waits: {waiting['reason']}" + (
                f": {message}" if message else ""
            )
    for condition in status.get("conditions") or []:
        if condition.get("type") == "PodScheduled" and condition.get("status") == "False":
            message = " ".join(str(condition.get("message", "")).split())
            return "Unschedulable", f"it cannot be scheduled: {message}"
    return "", "its pod is pending"


def _short(error: BaseException) -> str:
    status = getattr(error, "status", None)
    if status is not None:
        return f"{status} {getattr(error, 'reason', '')}".strip()
    return type(error).__name__


def _api_errors() -> tuple[type[BaseException], ...]:
    import kubernetes
    import urllib3

    return (kubernetes.client.ApiException, urllib3.exceptions.HTTPError)


def _how_it_ended(pod: Mapping[str, Any]) -> str:
    for status in (pod.get("status") or {}).get("containerStatuses") or []:
        terminated = (status.get("state") or {}).get("terminated")
        if status.get("name") == tfjob.CONTAINER and terminated:
            reason = terminated.get("reason")
            code = terminated.get("exitCode")
            return f"exited with code {code}" + (f" ({reason})" if reason else "")
    reason = (pod.get("status") or {}).get("reason")
    return f"failed ({reason})" if reason else "failed"


def _api_error(error, doing: str, verbs: str) -> KubernetesUnavailable:
    """One line for an API refusal: what was refused, and the fix."""
    if error.status == 403:
        return KubernetesUnavailable(
            f"the Trainer's service account may not {doing} ({verbs}): apply k8s/rbac.yaml, "
            "whose Role grants what trainer.workers > 1 needs, or set trainer.workers=1"
        )
    if error.status == 404 and "tfjob" in doing.lower():
        return KubernetesUnavailable(
            f"cannot {doing}: this cluster has no TFJob resource (kubeflow.org/v1); install "
            "the Kubeflow Training Operator v1.9, or set trainer.workers=1"
        )
    return KubernetesUnavailable(f"cannot {doing}: {error.status} {error.reason}")
