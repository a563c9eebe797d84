"""TF_CONFIG for a worker that runs as one pod of an Indexed Job (the JobSet's;
jobset_manifest.py).

A TFJob's operator writes each replica's TF_CONFIG, and the Trainer writes each worker
process's and container's. A JobSet sets nothing of the kind: its pods share one
template. So the template carries what every worker shares, the address of each worker
in index order (ADDRESSES_ENV, written by jobset_manifest.manifest from the pods' stable host
names), and Kubernetes gives each pod its own index (INDEX_ENV, JOB_COMPLETION_INDEX,
set in every pod of an Indexed Job). The worker's entrypoint makes its TF_CONFIG from
the two (`tf_config_from_env`) before TensorFlow starts.

Standard library only, and pure: the same JSON several_workers/cluster.tf_config writes.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence

TF_CONFIG = "TF_CONFIG"  # cluster.TF_CONFIG (several_workers/cluster.py loads TensorFlow)
WORKER_JOB = "worker"  # cluster.WORKER_JOB
# Every worker's host:port, in index order, comma-separated (the pod template's).
ADDRESSES_ENV = "IMGPIPE_WORKER_ADDRESSES"
# The pod's completion index: Kubernetes sets it in every pod of an Indexed Job.
INDEX_ENV = "JOB_COMPLETION_INDEX"


def tf_config(addresses: Sequence[str], index: int) -> str:
    """TF_CONFIG of worker `index` among `addresses` (cluster.tf_config's JSON).

    Raises:
      ValueError: fewer than 2 workers, or an index that is not one of them.
    """
    if len(addresses) < 2 or not 0 <= index < len(addresses):
        raise ValueError(
            f"worker index {index} is not one of {len(addresses)} workers "
            f"({', '.join(addresses) or 'none'}): a JobSet of trainer workers has 2 or more "
            "pods, indexed from 0"
        )
    return json.dumps(
        {
            "cluster": {WORKER_JOB: list(addresses)},
            "task": {"type": WORKER_JOB, "index": index},
        }
    )


def tf_config_from_env(env: Mapping[str, str]) -> str | None:
    """This worker's TF_CONFIG: `env`'s own when set (a TFJob's replica, a worker process
    or container), else made from ADDRESSES_ENV and INDEX_ENV (a JobSet's pod); None
    when `env` has neither.

    Raises:
      ValueError: ADDRESSES_ENV without a valid INDEX_ENV, or addresses that name fewer
        than 2 workers or name one twice; one line naming the variable.
    """
    if env.get(TF_CONFIG):
        return env[TF_CONFIG]
    listed = env.get(ADDRESSES_ENV, "").strip()
    if not listed:
        return None
    addresses = [a.strip() for a in listed.split(",")]
    if any(not a for a in addresses) or len(set(addresses)) != len(addresses):
        raise ValueError(
            f"{ADDRESSES_ENV} must list each worker's host:port once, comma-separated, got "
            f"{listed[:200]!r}"
        )
    raw = env.get(INDEX_ENV, "").strip()
    if not raw.isdigit():
        raise ValueError(
            f"{ADDRESSES_ENV} is set but {INDEX_ENV} is {raw[:40]!r}, not a pod index: the "
            "worker runs outside an Indexed Job's pod (a JobSet's), which Kubernetes gives "
            "its index"
        )
    return tf_config(addresses, int(raw))
