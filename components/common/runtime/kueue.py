"""Kueue's queue label: how a job, or a step's pod, names the LocalQueue that admits it
(kubeflow.queue_name; docs/distributed-training.md, "Kueue").

A job that names a queue is created suspended by Kueue's webhook and runs once Kueue has
admitted it against the queue's quota; on a cluster without Kueue the label does nothing.
The compiled Kubeflow package labels its GPU steps' pods (pipelines/kubeflow/compiler.py)
and, with trainer.workers > 1, tells the Trainer step the queue in QUEUE_ENV, so that the
TFJob or JobSet it launches names the queue too (`with_queue`).

Standard library only: the compiler and the Trainer's pod both import it.
"""

from __future__ import annotations

import copy
import os
import re
from collections.abc import Mapping
from typing import Any

# The label Kueue reads on a job (batch/v1 Job, JobSet, TFJob, ...) or a plain pod.
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
# The Trainer step's environment: the queue its launched job names (unset: none).
QUEUE_ENV = "IMGPIPE_KUEUE_QUEUE"
# A LocalQueue's name as the label carries it: an object name (RFC 1123: lower case,
# digits, '-' and '.', alphanumeric at both ends) no longer than a label value (63).
_QUEUE_NAME = re.compile(r"[a-z0-9]([-a-z0-9.]*[a-z0-9])?")
MAX_QUEUE_NAME = 63


def check_queue_name(name: str, setting: str) -> None:
    """Raises ValueError, in one line naming `setting`, for a name that no LocalQueue can
    have or that the queue label cannot hold."""
    if len(name) > MAX_QUEUE_NAME or not _QUEUE_NAME.fullmatch(name):
        shown = name if len(name) <= 80 else name[:77] + "..."
        raise ValueError(
            f"{setting} {shown!r} is not a Kueue LocalQueue name: at most {MAX_QUEUE_NAME} "
            "lower-case letters, digits, '-' and '.', starting and ending with a letter or "
            "digit (kubectl get localqueues lists the namespace's queues)"
        )


def with_queue(manifest: Mapping[str, Any], queue: str | None) -> dict[str, Any]:
    """A copy of the job `manifest` whose own labels name `queue` (QUEUE_LABEL); the
    manifest itself when `queue` is None. Only the job's metadata is labelled: Kueue
    admits the job as one workload, and its pods follow it.

    Raises:
      ValueError: `queue` is not a LocalQueue name (check_queue_name).
    """
    if queue is None:
        return dict(manifest)
    check_queue_name(queue, "the queue")
    labelled = copy.deepcopy(dict(manifest))
    metadata = labelled.setdefault("metadata", {})
    metadata["labels"] = {**(metadata.get("labels") or {}), QUEUE_LABEL: queue}
    return labelled


def queue_from_env(env: Mapping[str, str] = os.environ) -> str | None:
    """The queue QUEUE_ENV names (None when unset or empty).

    Raises:
      ValueError: not a LocalQueue name, naming the variable.
    """
    queue = env.get(QUEUE_ENV, "").strip()
    if not queue:
        return None
    check_queue_name(queue, QUEUE_ENV)
    return queue
