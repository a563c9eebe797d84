"""What a launcher of a training's workers as replica pods of the Trainer pod's own
cluster needs, whichever kind of job makes the pods (a TFJob, kubernetes_tfjob.py, or
a JobSet, kubernetes_jobset.py; each described by a `JobKind`):
the step's own pod, read through the API (the replicas are made from it, step_pod.py);
the replicas' pods watched while they start, so that one that never can, or that has
waited START_TIMEOUT_S, fails the training; the chief's (worker 0's) log streamed into
the Trainer's; a failed replica named in one line; and each replica's log kept in the
model_run artifact (workers/worker-<i>.log). The launcher (kubernetes_jobs.py) creates,
waits for and deletes either kind of job.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
from collections.abc import Callable, Collection, Mapping
from typing import Any, NoReturn

from imgpipe.components.trainer.several_workers import choice, replicas

POLL_SECONDS = 2.0
# How long the replicas may take to start (scheduled, image pulled, running): a GPU node
# pool that scales up takes minutes. Past it the job is deleted, naming what it waits for.
START_TIMEOUT_S = 1200.0
# How long the API server may fail to answer the Trainer's polls before the training fails.
API_OUTAGE_S = 60.0
# A replica's container waiting for one of these never starts, however long it waits.
NEVER_STARTS = frozenset({"InvalidImageName", "CreateContainerConfigError", "ErrImageNeverPull"})


class KubernetesUnavailable(ValueError):
    """The workers' job cannot be created here; the message is one line naming the fix."""


@dataclasses.dataclass(frozen=True)
class JobKind:
    """What the launcher needs to know of one kind of job of replica pods."""

    kind: str  # as messages name it: TFJob, JobSet
    group: str
    version: str
    plural: str
    # The replicas' container, whose log is the replica's.
    container: str
    # (the step's pod, workers, the job's folder) -> the job's manifest.
    manifest: Callable[[Mapping[str, Any], int, str], dict[str, Any]]
    # The job's name -> the label selector of its pods.
    pod_selector: Callable[[str], str]
    # A pod of the job -> its replica's index, None for a pod that is no replica.
    pod_index: Callable[[Mapping[str, Any]], int | None]
    # The job, as the API serves it -> None while it runs, else (succeeded, message).
    ended: Callable[[Mapping[str, Any]], tuple[bool, str] | None]
    # The job -> whether it is suspended (Kueue holds it until it is admitted).
    suspended: Callable[[Mapping[str, Any]], bool]
    # Why a replica may have no pod yet: the controller that makes them.
    no_pod: str
    # The fix when the cluster has no such resource.
    missing: str


class ReplicaPods:
    """The part of a launcher of replica pods (launchers.Launcher) that does not depend
    on the kind of job, which `kind` describes: the step's pod, the replicas' pods and
    their logs, and why one has not started or has failed."""

    # The replicas do not share the Trainer's disk or its memory.
    shares_machine = False

    def __init__(
        self,
        kind: JobKind,
        client_factory: Callable[[], Any],
        poll_seconds: float = POLL_SECONDS,
        start_timeout_s: float = START_TIMEOUT_S,
        api_outage_s: float = API_OUTAGE_S,
    ):
        self._kind = kind
        self._client_factory = client_factory
        self._poll_seconds = poll_seconds
        self._start_timeout_s = start_timeout_s
        self._api_outage_s = api_outage_s

    def step_pod(self) -> dict[str, Any]:
        """The Trainer's own pod, as the API serves it (camelCase).

        Raises:
          KubernetesUnavailable: the pod's name is not known, or it cannot be read.
        """
        name = os.environ.get(choice.POD_NAME_ENV)
        namespace = os.environ.get(choice.POD_NAMESPACE_ENV)
        if not name or not namespace:
            raise KubernetesUnavailable(
                f"{choice.LAUNCHER_ENV}={choice.KUBERNETES} needs the Trainer pod's name and "
                f"namespace in {choice.POD_NAME_ENV} and {choice.POD_NAMESPACE_ENV}: "
                "compile the package again with `imgpipe kfp compile` (it asks Kubernetes "
                "for them)"
            )
        import kubernetes  # type: ignore[import-untyped]

        self._api = self._client_factory()
        self._core = kubernetes.client.CoreV1Api(self._api)
        self._custom = kubernetes.client.CustomObjectsApi(self._api)
        try:
            pod = self._core.read_namespaced_pod(name, namespace)
        except kubernetes.client.ApiException as e:
            raise api_error(e, f"read its own pod {namespace}/{name}", "get pods") from None
        return self._api.sanitize_for_serialization(pod)

    def _pods(self, name: str, namespace: str) -> list[dict[str, Any]]:
        """Every pod of the job `name`, as the API serves them."""
        pods = self._core.list_namespaced_pod(
            namespace, label_selector=self._kind.pod_selector(name)
        )
        return self._api.sanitize_for_serialization(pods)["items"]

    def _replicas(
        self, pods: list[dict[str, Any]], stale: Collection[str] = ()
    ) -> dict[int, dict[str, Any]]:
        """The replicas' pods by index: of each index's live pods (not being deleted, not
        one of the `stale` uids), the newest."""
        found: dict[int, dict[str, Any]] = {}
        for pod in sorted(pods, key=lambda p: p["metadata"].get("creationTimestamp") or ""):
            metadata = pod["metadata"]
            index = self._kind.pod_index(pod)
            if index is None or metadata.get("deletionTimestamp") or metadata.get("uid") in stale:
                continue
            found[index] = pod
        return found

    def _check_starting(self, pods, workers_count: int, waited: float, log_dir: str) -> None:
        """Fails the training for a replica that will not start: at once for one that
        never can (NEVER_STARTS), else once the replicas have waited START_TIMEOUT_S."""
        for index in range(workers_count):
            pod = pods.get(index)
            if pod is not None and phase(pod) != "Pending":
                continue
            reason, why = waiting_for(pod, self._kind.no_pod)
            if reason in NEVER_STARTS or waited > self._start_timeout_s:
                where = f" (pod {pod['metadata']['name']})" if pod is not None else ""
                raise replicas.WorkersFailed(
                    f"trainer worker {index} of {workers_count}{where} has not started "
                    f"after {waited:.0f} s: {why}; the {self._kind.kind} was deleted and "
                    f"nothing was exported (logs: {log_dir})"
                )

    def _fail(self, index, pod, namespace, workers_count, log_dir) -> NoReturn:
        pod_name = pod["metadata"]["name"]
        replicas.raise_failed(
            f"trainer worker {index} of {workers_count} (pod {namespace}/{pod_name})",
            how_it_ended(pod, self._kind.container),
            self._keep_log(pod_name, namespace, log_dir, index),
            workers_count,
            f"the {self._kind.kind} was deleted with its other workers",
            log_dir,
        )

    def _follow(self, pod: Mapping[str, Any], namespace: str) -> replicas.LogFollower:
        def open_stream() -> replicas.LogStream:
            response = self._core.read_namespaced_pod_log(
                pod["metadata"]["name"],
                namespace,
                container=self._kind.container,
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
            for index, pod in self._replicas(self._pods(name, namespace)).items():
                self._keep_log(pod["metadata"]["name"], namespace, log_dir, index)

    def _keep_log(self, pod_name: str, namespace: str, log_dir: str, index: int) -> str:
        """Keeps replica `index`'s log in log_dir; returns it."""
        import kubernetes

        try:
            text = self._core.read_namespaced_pod_log(
                pod_name, namespace, container=self._kind.container
            )
        except kubernetes.client.ApiException as e:
            text = f"(its log could not be read: {e.status} {e.reason})\n"
        return replicas.keep_log(log_dir, index, text)


def true_conditions(job: Mapping[str, Any]) -> dict[str, str]:
    """The job's conditions whose status is True: type -> message, on one line."""
    return {
        c["type"]: " ".join(str(c.get("message", "")).split())
        for c in (job.get("status") or {}).get("conditions") or []
        if c.get("status") == "True"
    }


def phase(pod: Mapping[str, Any]) -> str:
    return (pod.get("status") or {}).get("phase") or "Pending"


def waiting_for(pod: Mapping[str, Any] | None, no_pod: str) -> tuple[str, str]:
    """Why a replica has not started: (a reason's code or "", one line saying it);
    `no_pod` when it has no pod yet."""
    if pod is None:
        return "", no_pod
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


def short(error: BaseException) -> str:
    status = getattr(error, "status", None)
    if status is not None:
        return f"{status} {getattr(error, 'reason', '')}".strip()
    return type(error).__name__


def api_errors() -> tuple[type[BaseException], ...]:
    import kubernetes
    import urllib3

    return (kubernetes.client.ApiException, urllib3.exceptions.HTTPError)


def how_it_ended(pod: Mapping[str, Any], container: str) -> str:
    """How a replica's pod ended, from its `container`'s state or else the pod's."""
    for status in (pod.get("status") or {}).get("containerStatuses") or []:
        terminated = (status.get("state") or {}).get("terminated")
        if status.get("name") == container and terminated:
            reason = terminated.get("reason")
            code = terminated.get("exitCode")
            return f"exited with code {code}" + (f" ({reason})" if reason else "")
    reason = (pod.get("status") or {}).get("reason")
    return f"failed ({reason})" if reason else "failed"


def api_error(error, doing: str, verbs: str) -> KubernetesUnavailable:
    """One line for an API refusal: what was refused, and the fix."""
    if error.status == 403:
        return KubernetesUnavailable(
            f"the Trainer's service account may not {doing} ({verbs}): apply k8s/rbac.yaml, "
            "whose Role grants what trainer.workers > 1 needs, or set trainer.workers=1"
        )
    return KubernetesUnavailable(f"cannot {doing}: {error.status} {error.reason}")
