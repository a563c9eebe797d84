"""A training on several workers (trainer.workers > 1; docs/distributed-training.md):
what the Trainer's process prepares, hands to a launcher and publishes
(`train_on_workers`), and what each worker trains (`train_worker`, which worker.py runs).

The Trainer's process prepares the training once (task.py: the splits, the window of
spans, the backups' folder) as a `WorkerJob`; the launcher that choice.py names
(launchers.py) pickles it into the job's folder, starts the workers and waits for them
all; the chief exports, and the Trainer publishes that export once every worker has
finished.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import tempfile
from collections.abc import Iterator
from typing import Any

import tensorflow as tf
from absl import logging
from tfx.components.trainer import fn_args_utils

from imgpipe.components.common.images import model_input
from imgpipe.components.common.storage import fileio, staging
from imgpipe.components.trainer import devices, memory, resume, training
from imgpipe.components.trainer import summary as summary_lib
from imgpipe.components.trainer.config import TrainerConfig
from imgpipe.components.trainer.several_workers import (
    cluster,
    launchers,
    local_processes,
    replicas,
)

# The workers' logs, in the model_run artifact.
WORKER_LOGS_DIR = "workers"
# The job's folder of workers elsewhere (a TFJob's pods, containers), in the model_run
# artifact while they run.
WORKER_JOB_DIR = ".workers-job"

# The FnArgs fields a worker trains with.
_WORKER_FN_ARGS = (
    "train_files",
    "eval_files",
    "train_steps",
    "eval_steps",
    "serving_model_dir",
    "model_run_dir",
    "custom_config",
)


@dataclasses.dataclass(frozen=True)
class WorkerJob:
    """What every worker process of a training on several workers trains, as the
    Trainer's process prepared it (the launcher pickles it into the job's folder:
    replicas.save_job).

    Attributes:
      fn_args: the FnArgs fields the training reads (_WORKER_FN_ARGS).
      export_dir: where the chief exports the serving model.
      result_dir: where the chief writes its run summary.
    """

    fn_args: dict[str, Any]
    config: TrainerConfig
    labels: list[str]
    sources: training.Sources
    inputs: model_input.ModelInput
    export_dir: str
    result_dir: str
    timeouts: cluster.Timeouts = cluster.Timeouts()


def train_on_workers(
    fn_args,
    config: TrainerConfig,
    labels: list[str],
    sources: training.Sources,
    inputs: model_input.ModelInput,
) -> None:
    """Trains on config.workers workers, which the launcher choice.py names starts
    (launchers.py: processes of this machine, a TFJob or a JobSet of the Trainer pod's
    cluster, or containers on this machine's Docker engine), the chief exporting into the model
    artifact's work folder, which is published only once every worker has finished;
    then writes the run summary, and removes the backups.

    Raises:
      ValueError: trainer.workers cannot run here (more workers than training images,
        GPUs that do not divide among them), naming the setting and the fix.
      WorkersFailed: a worker failed; nothing was published.
    """
    records = sources.train.records
    if records is not None and config.workers > records:
        raise ValueError(
            f"trainer.workers={config.workers} is more than the {records} images of "
            f"{sources.train.name}: each worker needs a share; set trainer.workers to "
            f"{records} or fewer"
        )

    def local_gpus() -> list[str]:
        physical = tf.config.list_physical_devices("GPU")
        return local_processes.assign_gpus(
            local_processes.visible_gpu_ids(len(physical)), config.num_gpus, config.workers
        )

    launcher = launchers.launcher(local_gpus, config.launcher)
    per_worker = config
    if launcher.shares_machine:
        per_worker = dataclasses.replace(
            config,
            # The workers share this machine's memory: each plans with its part.
            ram_budget_mb=(config.ram_budget_mb or memory.available_memory_bytes() / 2 / memory.MB)
            / config.workers,
        )
    devices.plan_devices(  # refuses mixed precision on without GPUs, before any start
        ["GPU"] * (config.num_gpus or 0), ["CPU"], None, config.mixed_precision
    )
    log_dir = os.path.join(fn_args.model_run_dir, WORKER_LOGS_DIR)
    fields = {name: getattr(fn_args, name) for name in _WORKER_FN_ARGS}
    with _job_folder(fn_args.model_run_dir, launcher.shares_machine) as folder:
        result_dir = os.path.join(folder, "result")
        shared_export = os.path.join(folder, "export")

        def train(export_dir: str) -> None:
            # Workers elsewhere export into the job's folder, copied here once all are done.
            target = export_dir if launcher.shares_machine else shared_export
            job = WorkerJob(fields, per_worker, labels, sources, inputs, target, result_dir)
            logging.info("Trainer: %d workers (logs: %s)", config.workers, log_dir)
            launcher.run(job, config.workers, folder, log_dir, _paths_of(job))
            if not launcher.shares_machine:
                fileio.copy_tree(shared_export, export_dir)

        audit = training.publish(fn_args, config, labels, train)
        trained = summary_lib.read_if_present(result_dir)
    if trained is None:
        raise replicas.WorkersFailed(f"the chief worker wrote no summary into {result_dir}")
    summary_lib.write(fn_args.model_run_dir, dataclasses.replace(trained, label_audit=audit))
    resume.remove(sources.backups[0])
    logging.info("Exported %s", fn_args.serving_model_dir)


@contextlib.contextmanager
def _job_folder(model_run_dir: str, local: bool) -> Iterator[str]:
    """The job's folder, removed at the end: a local temporary folder for workers of
    this machine, else a hidden folder of the model_run artifact, which workers
    elsewhere see (on the pipeline root)."""
    if local:
        with tempfile.TemporaryDirectory(prefix="imgpipe-workers-") as folder:
            yield folder
        return
    folder = os.path.join(model_run_dir, WORKER_JOB_DIR)
    fileio.remove(folder)  # a retried step's
    try:
        yield folder
    finally:
        fileio.remove(folder)


def _paths_of(job: WorkerJob) -> list[str]:
    """Every path a worker reads or writes, beside the job's folder."""
    sources = job.sources
    paths = [*sources.train.files, *sources.eval.files, sources.backups[0], job.export_dir]
    paths += [job.fn_args["model_run_dir"], job.result_dir]
    if sources.statistics_uri:
        paths.append(sources.statistics_uri)
    if sources.champion is not None and sources.champion.model is not None:
        paths.append(sources.champion.model.path)
    return paths


def train_worker(job: WorkerJob, member: cluster.Member, strategy: tf.distribute.Strategy) -> None:
    """One worker's part (worker.py runs it, after cluster.connect): trains on its share
    of the data in step with the others; the chief exports into job.export_dir and writes
    the run summary into job.result_dir, the others export into temporary folders that
    are removed (an export may read variables through collectives that all must join),
    and keep their TensorBoard logs in one too."""
    plan = devices.multi_worker_plan(
        strategy.extended.worker_devices, member.workers, job.config.mixed_precision
    )
    devices.log_plan(plan)
    devices.apply_precision(plan)
    with contextlib.ExitStack() as stack:
        # A worker in its own pod copies object-store shards itself (on one machine the
        # Trainer did), and writes what is bound for an object store through local folders.
        sources = dataclasses.replace(
            job.sources,
            train=training.staged(job.sources.train, "train", stack),
            eval=training.staged(job.sources.eval, "eval", stack),
        )
        fields = dict(job.fn_args)
        if member.chief:
            fields["model_run_dir"] = stack.enter_context(
                staging.local_folder(fields["model_run_dir"], "imgpipe-run-")
            )
        else:
            fields["model_run_dir"] = stack.enter_context(
                tempfile.TemporaryDirectory(prefix="imgpipe-worker-run-")
            )
        fn_args = fn_args_utils.FnArgs(**fields)
        trained = training.fit_model(
            fn_args,
            job.config,
            (plan, strategy),
            job.labels,
            sources,
            job.inputs,
            (member.workers, member.index),
        )
        folder = job.export_dir
        if member.chief:
            folder = stack.enter_context(staging.local_folder(folder, "imgpipe-export-"))
        else:
            folder = stack.enter_context(tempfile.TemporaryDirectory(prefix="imgpipe-export-"))
        training.export_trained(
            trained, folder, job.config, job.labels, job.inputs, job.sources.statistics_uri
        )
        if member.chief:
            summary_lib.write(job.result_dir, trained.summary)
