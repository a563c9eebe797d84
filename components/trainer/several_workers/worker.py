"""`python -m imgpipe.components.trainer.several_workers.worker FOLDER`: one worker
process of a training on several workers. Each launcher starts one per worker (a
process of this machine, a TFJob's or a JobSet's pod, a container), with TF_CONFIG
saying which one it is (or a JobSet pod's index, indexed_tf_config.py), and FOLDER
holding the job (job.WorkerJob) the Trainer's process prepared.

It joins the others first (cluster.connect: before anything else runs TensorFlow here),
then trains its part (job.train_worker). A failure ends it with one line after
cluster.ERROR_MARK, which the launcher reports (replicas.raise_failed).
"""

from __future__ import annotations

import os
import sys
import traceback

from absl import logging

from imgpipe.components.trainer.several_workers import choice, cluster, indexed_tf_config, replicas
from imgpipe.components.trainer.several_workers import job as job_lib


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print(f"usage: python -m {choice.WORKER_MODULE} JOB_FOLDER", file=sys.stderr)
        return 2
    # Its own TF_CONFIG, or one made from its index among the JobSet's addresses.
    member = cluster.from_tf_config(indexed_tf_config.tf_config_from_env(os.environ) or "")
    job = replicas.load_job(argv[1])
    if not isinstance(job, job_lib.WorkerJob):
        raise ValueError(f"{argv[1]} holds no trainer job: {type(job).__name__}")
    strategy = cluster.connect(member, job.timeouts)
    cluster.fix_keras()
    job_lib.train_worker(job, member, strategy)
    logging.info("%s finished", member.name)
    return 0


if __name__ == "__main__":
    logging.set_verbosity(logging.INFO)
    logging.use_absl_handler()
    try:
        code = main(sys.argv)
    except Exception as e:  # reported as one line: the job fails on it
        traceback.print_exc()
        line = " ".join(f"{type(e).__name__}: {e}".split())
        print(f"{cluster.ERROR_MARK} {line[:2000]}", file=sys.stderr, flush=True)
        code = 1
    sys.stdout.flush()
    sys.stderr.flush()
    if code:
        # At once: a clean exit would wait at the coordination service's shutdown barrier
        # for the other workers, which this one has already failed.
        os._exit(code)
    # A clean exit waits there for every worker to finish its export.
    sys.exit(code)
