"""The TFX Trainer entry point: `run_fn(fn_args)` trains, checkpoints and exports.

Reads the `Examples` artifact (shards, label map, conversion summary) and the
ImageStatistics artifact (mean and std), whose URI the ImageTrainer executor passes as
fn_args.custom_config["image_statistics_uri"].
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import os
import tempfile
from collections.abc import Callable, Iterator
from typing import Any

import attr
import keras
import tensorflow as tf
from absl import logging
from tfx.components.trainer import fn_args_utils

from imgpipe.components.common.formats import (
    artifacts,
    image_stats,
    layout,
    manifest,
)
from imgpipe.components.common.formats import champion as champion_lib
from imgpipe.components.common.images import model_input
from imgpipe.components.common.runtime import allocator
from imgpipe.components.common.storage import fileio, outputs, staging
from imgpipe.components.trainer import (
    candidate_audit,
    cluster,
    datasets,
    devices,
    export,
    fitting,
    launch,
    launchers,
    memory,
    resume,
    warm_start,
)
from imgpipe.components.trainer import input as input_lib
from imgpipe.components.trainer import model as model_lib
from imgpipe.components.trainer import summary as summary_lib
from imgpipe.components.trainer import window as window_lib
from imgpipe.components.trainer import workers as workers_lib
from imgpipe.components.trainer.config import (
    CHAMPION_URI_KEY,
    IMAGE_STATISTICS_URI_KEY,
    SPAN_KEY,
    TrainerConfig,
    from_custom_config,
)


def examples_uri_and_split(file_pattern: str) -> tuple[str, str]:
    """(examples URI, split) from a TFX file pattern like <uri>/Split-train/*."""
    split_dir = os.path.dirname(file_pattern.rstrip("/"))
    name = os.path.basename(split_dir)
    if not name.startswith(layout.SPLIT_DIR_PREFIX):
        raise ValueError(f"{file_pattern} is not an <examples>/Split-<name>/* pattern")
    return os.path.dirname(split_dir), name[len(layout.SPLIT_DIR_PREFIX) :]


def resolve_model_input(
    config: TrainerConfig, statistics_uri: str | None, train_split: str = layout.TRAIN_SPLIT
) -> model_input.ModelInput:
    """The model's input, resolved once: the side, the crop fraction, the mean and the
    std are ImageStatistics' values of the train split (the pipeline computed them at the
    Trainer's geometry, `TrainerConfig.input_size`) unless the config sets them; without
    statistics the side is the config's, `auto` resolved here.

    Raises:
      ValueError: neither a statistics artifact nor mean and std in the config.
      IncompleteOutputError: the statistics artifact is not complete.
    """
    stats: model_input.ModelInput | None = None
    if statistics_uri:
        manifest.verify(statistics_uri)
        try:
            stats = image_stats.read(statistics_uri).normalization(train_split)
        except KeyError as e:
            raise ValueError(f"{statistics_uri}: {e.args[0]}") from None
        if config.image_size is not None and stats.image_size != config.image_size:
            logging.warning(
                "statistics were computed at %d px, the model trains at %d px",
                stats.image_size,
                config.image_size,
            )
    elif config.mean is None or config.std is None:
        raise ValueError(
            "the Trainer needs normalization constants: connect an "
            "ImageStatistics artifact (image_statistics=...) or set trainer "
            "mean and std"
        )
    mean = config.mean if config.mean is not None else stats.mean  # type: ignore[union-attr]
    std = config.std if config.std is not None else stats.std  # type: ignore[union-attr]
    crop = (
        config.crop_fraction
        or (stats.crop_fraction if stats else None)
        or model_input.DEFAULT_CROP_FRACTION
    )
    side = config.image_size or (stats.image_size if stats else config.input_size)
    return model_input.ModelInput(
        tuple(float(v) for v in mean),
        tuple(float(v) for v in std),
        side,
        float(crop),
        config.normalize_on_host,
    )


def run_fn(fn_args) -> None:
    """Trains the classifier and exports it to fn_args.serving_model_dir.

    Args:
      fn_args: tfx FnArgs: train_files, eval_files, train_steps, eval_steps,
        serving_model_dir, model_run_dir and custom_config (see TrainerConfig).
    """
    custom_config = dict(fn_args.custom_config or {})
    configured = from_custom_config(custom_config)
    examples_uri, train_split = examples_uri_and_split(fn_args.train_files[0])
    _, eval_split = examples_uri_and_split(fn_args.eval_files[0])
    manifest.verify(examples_uri)
    if configured.tune_malloc:
        allocator.tune_malloc()
    statistics_uri = custom_config.get(IMAGE_STATISTICS_URI_KEY)
    inputs = resolve_model_input(configured, statistics_uri, train_split)
    # From here the config's side is the model input's, `auto` made concrete once.
    config = configured.resolved(inputs.image_size)
    labels = artifacts.load_labels(examples_uri)
    champion_uri = custom_config.get(CHAMPION_URI_KEY)
    resolved = champion_lib.read(champion_uri) if champion_uri else None
    chosen = choose_window(config, resolved, custom_config.get(SPAN_KEY), labels, train_split)
    splits = (train_split, eval_split)
    sources = _sources(
        fn_args, config, examples_uri, splits, statistics_uri, resolved, chosen, len(labels)
    )
    _train_here_or_on_workers(fn_args, config, labels, sources, splits, inputs)


def _sources(
    fn_args,
    config: TrainerConfig,
    examples_uri: str,
    splits: tuple[str, str],
    statistics_uri: str | None,
    resolved: champion_lib.Resolved | None,
    chosen: window_lib.Window,
    classes: int,
) -> Sources:
    """The splits to read (train from the window of spans), and the backup folder and
    the digest of what this training is."""
    train_split, eval_split = splits
    champion = resolved.model if resolved is not None and config.warm_start else None
    fingerprint = resume.fingerprint(
        examples_uri,
        splits,
        statistics_uri,
        config,
        (fn_args.train_steps, fn_args.eval_steps),
        champion.path if champion else None,
        [s.examples_uri for s, _ in chosen.earlier],
    )
    backups = os.path.join(
        resume.backups_root(fn_args.model_run_dir, config.checkpoint_dir), fingerprint
    )
    train_source = input_lib.combine(
        [input_lib.split_source(examples_uri, train_split)]
        + [input_lib.split_source(s.examples_uri, train_split) for s, _ in chosen.earlier],
        [None] + [remap for _, remap in chosen.earlier],
        classes,
    )
    eval_source = input_lib.split_source(examples_uri, eval_split)
    return Sources(
        train_source,
        eval_source,
        statistics_uri,
        resolved,
        (backups, fingerprint),
        chosen,
        resume.training_digest(
            examples_uri,
            splits,
            config,
            (fn_args.train_steps, fn_args.eval_steps),
            [s.examples_uri for s, _ in chosen.earlier],
        ),
    )


def _train_here_or_on_workers(
    fn_args,
    config: TrainerConfig,
    labels: list[str],
    sources: Sources,
    splits: tuple[str, str],
    inputs: model_input.ModelInput,
) -> None:
    """Trains in this process (trainer.workers=1) or on workers, with the shards and the
    run's folder staged locally unless the workers are elsewhere."""
    train_split, eval_split = splits
    # Workers elsewhere (a TFJob) read the shards, and write the run's files, themselves.
    elsewhere = config.workers > 1 and launch.launcher_name() != launch.PROCESSES
    with contextlib.ExitStack() as stack:
        if not elsewhere:
            train_source, eval_source = (
                _staged(source, split, stack)
                for source, split in ((sources.train, train_split), (sources.eval, eval_split))
            )
            sources = dataclasses.replace(sources, train=train_source, eval=eval_source)
        run_dir = fn_args.model_run_dir
        if not elsewhere:
            run_dir = stack.enter_context(staging.local_folder(run_dir, "imgpipe-run-"))
        train = _train if config.workers == 1 else _train_on_workers
        train(attr.evolve(fn_args, model_run_dir=run_dir), config, labels, sources, inputs)


def _staged(
    source: input_lib.SplitSource, split: str, stack: contextlib.ExitStack
) -> input_lib.SplitSource:
    """`source`, its object-store shards copied to a local folder that `stack` removes."""
    if not staging.needs_staging(source.files):
        return source
    folder = stack.enter_context(tempfile.TemporaryDirectory(prefix="imgpipe-shards-"))
    return dataclasses.replace(
        source, files=staging.stage_files(source.files, os.path.join(folder, split), source.name)
    )


def choose_window(
    config: TrainerConfig,
    resolved: champion_lib.Resolved | None,
    span: int | None,
    labels: list[str],
    train_split: str,
) -> window_lib.Window:
    """The spans to train on (window.py), from the spans admitted beside the champion."""
    # Read once, at the head of the run (the ChampionResolver): the spans admitted then.
    admitted = list(resolved.admitted) if resolved is not None else []
    damaged = list(resolved.records_note) if resolved is not None else []

    def missing(examples_uri: str) -> str:
        if not fileio.exists(examples_uri):
            return f"its examples {examples_uri} are gone (deleted)"
        try:
            manifest.verify(examples_uri)
            input_lib.split_source(examples_uri, train_split)
        except (OSError, ValueError, KeyError) as e:
            return f"its examples {examples_uri} cannot be read ({' '.join(str(e).split())[:200]})"
        return ""

    champion = resolved.model if resolved is not None else None
    served = champion.training().get("spans", []) if champion is not None else []
    chosen = window_lib.choose(admitted, span, labels, config.spans, missing, served)
    if damaged:  # a damaged record admits nothing, and says so
        unread = "span records not read: " + "; ".join(damaged)
        chosen = dataclasses.replace(
            chosen, note=f"{chosen.note}; {unread}" if chosen.note else unread
        )
    logging.info("Trainer: trains on %s", window_lib.describe(chosen))
    return chosen


def _train(
    fn_args,
    config: TrainerConfig,
    labels: list[str],
    sources: Sources,
    inputs: model_input.ModelInput,
) -> None:
    plan = devices.plan_devices(
        *devices.visible_devices(), num_gpus=config.num_gpus, mixed_precision=config.mixed_precision
    )
    devices.log_plan(plan)
    devices.apply_precision(plan)
    try:
        _train_and_export(fn_args, config, plan, labels, sources, inputs)
    finally:
        keras.mixed_precision.set_global_policy(devices.FLOAT32)


@dataclasses.dataclass(frozen=True)
class Sources:
    """What training reads beside its config: the splits (train from the window of
    spans), the statistics artifact, the resolved champion (for a warm start), where its
    backups go, and the window."""

    train: input_lib.SplitSource
    eval: input_lib.SplitSource
    statistics_uri: str | None
    champion: champion_lib.Resolved | None
    backups: tuple[str, str]  # this training's backup folder, and its fingerprint
    window: window_lib.Window
    training_digest: str  # resume.training_digest: what the model is trained on


def plan_phases(
    config: TrainerConfig, epochs: int, warm: warm_start.WarmStart
) -> list[summary_lib.Phase]:
    """The fit() calls: with a pretrained backbone and a fresh head, `head` first on a
    frozen backbone, then `full` at the fine-tuning rate; from scratch, `full` alone."""
    pretrained = bool(config.weights) or warm.backbone_trained
    rate = config.learning_rate * (config.fine_tune_rate if pretrained else 1.0)
    head_epochs = (
        min(config.frozen_epochs, epochs - 1) if pretrained and not warm.head_trained else 0
    )
    phases = []
    if head_epochs > 0:
        phases.append(summary_lib.Phase("head", head_epochs, config.learning_rate, False))
    phases.append(summary_lib.Phase("full", epochs - head_epochs, rate, True))
    return phases


def _train_and_export(
    fn_args,
    config: TrainerConfig,
    plan: devices.DevicePlan,
    labels: list[str],
    sources: Sources,
    inputs: model_input.ModelInput,
) -> None:
    trained = fit_model(
        fn_args, config, (plan, devices.make_strategy(plan)), labels, sources, inputs
    )
    audit = _publish(
        fn_args,
        config,
        labels,
        lambda folder: _export(trained, folder, config, labels, inputs, sources.statistics_uri),
    )
    summary_lib.write(
        fn_args.model_run_dir, dataclasses.replace(trained.summary, label_audit=audit)
    )
    resume.remove(sources.backups[0])
    logging.info("Exported %s", fn_args.serving_model_dir)


@dataclasses.dataclass(frozen=True)
class Trained:
    """A trained model, with its run summary (the label audit not yet in it) and the
    record of what it was trained on (served_models.TRAINING_FILE)."""

    model: keras.Model
    summary: summary_lib.TrainingSummary
    training: dict[str, Any]


def fit_model(
    fn_args,
    config: TrainerConfig,
    placement: tuple[devices.DevicePlan, tf.distribute.Strategy],
    labels: list[str],
    sources: Sources,
    inputs: model_input.ModelInput,
    worker: tuple[int, int] = (1, 0),
) -> Trained:
    """Builds the model, resumes from a backup if there is one, and trains it.

    Args:
      placement: the device plan, and the strategy that carries it out.
      worker: (workers, this worker's index) of a training on several workers, which
        each read their share of the data; only worker 0 publishes backups and writes
        TensorBoard's sample images.
    """
    plan, strategy = placement
    chief = worker[1] == 0
    global_batch = config.batch_size * plan.replicas
    steps_per_epoch, epochs = _schedule(
        fn_args.train_steps,
        sources.train.records or 0,
        global_batch,
        config.epochs,
        config.min_train_steps,
    )
    model, warm = _build(config, labels, strategy, sources, inputs, steps_per_epoch * epochs)
    phases = plan_phases(config, epochs, warm)
    folder, fingerprint = sources.backups
    base = _backup_base(fingerprint, steps_per_epoch, global_batch, phases)
    found, best_weights = fitting.start_from(
        model, strategy, config, phases, resume.find(folder, fingerprint, base.plan)
    )
    base = dataclasses.replace(base, data_seed=resume.data_seed(config.seed, found.state))
    run = _run(
        fn_args, config, model, strategy, sources, global_batch, inputs, base.data_seed, worker
    )
    progress = fitting.fit_phases(
        run,
        phases,
        (folder, base),
        (found.state, best_weights),
        lambda log_dir, stopping, backup: _callbacks(config, log_dir, stopping, backup),
        datasets.sample_callbacks(config, sources.train, fn_args.model_run_dir, inputs)
        if chief
        else [],
    )
    training = {
        "digest": sources.training_digest,
        "spans": [s for s in sources.window.spans if s is not None],
        "backbone": config.backbone,
        "image_size": config.input_size,
        "weights": config.weights or "none (from scratch)",
        "warm_start": warm.status,
        "epochs": sum(p.epochs for p in phases),
        "steps_per_epoch": steps_per_epoch,
        "global_batch": global_batch,
        "workers": plan.workers,
    }
    summary = _training_summary(
        config, sources, warm, (phases, progress), found, plan, (steps_per_epoch, global_batch)
    )
    return Trained(model, summary, training)


def _backup_base(
    fingerprint: str, steps_per_epoch: int, global_batch: int, phases: list[summary_lib.Phase]
) -> resume.BackupState:
    """The backup state before any phase ran: what a backup must match to be resumed."""
    return resume.BackupState(
        fingerprint,
        resume.Plan(
            steps_per_epoch,
            global_batch,
            tuple(resume.PlannedPhase(p.name, p.epochs) for p in phases),
        ),
        phase=0,
        optimizer_steps=0,
        progress=(),
    )


def _training_summary(
    config: TrainerConfig,
    sources: Sources,
    warm: warm_start.WarmStart,
    phases_run: tuple[list[summary_lib.Phase], list[resume.PhaseProgress]],
    found: resume.Found,
    plan: devices.DevicePlan,
    batches: tuple[int, int],
) -> summary_lib.TrainingSummary:
    """The training's summary from its phases as planned and run (phases_run), the
    backup it resumed from and its (steps per epoch, global batch)."""
    phases, progress = phases_run
    steps_per_epoch, global_batch = batches
    accuracies = [p.val_accuracy for p in progress if p.val_accuracy is not None]
    return summary_lib.TrainingSummary(
        backbone=config.backbone,
        image_size=config.input_size,
        weights=config.weights,
        warm_start=warm.status,
        warm_start_note=warm.note,
        steps_per_epoch=steps_per_epoch,
        phases=resume.summary_phases(phases, progress),
        val_accuracy=accuracies[-1] if accuracies else None,
        resume=found.resumption(),
        window=window_lib.describe(sources.window),
        distribution=summary_lib.Distribution(
            plan.strategy,
            plan.workers,
            plan.replicas,
            global_batch,
            devices.all_reduce(plan),
        ),
    )


def _build(
    config: TrainerConfig,
    labels: list[str],
    strategy: tf.distribute.Strategy,
    sources: Sources,
    inputs: model_input.ModelInput,
    total_steps: int,
) -> tuple[keras.Model, warm_start.WarmStart]:
    """The classifier, warm-started when asked, batch norm fitted to the run's length."""
    with strategy.scope():
        model = model_lib.build_model(config, len(labels), inputs)
        warm = warm_start.apply(model, config, labels, sources.champion, inputs)
        lowered = model_lib.fit_batch_norm_to_run(model, total_steps)
        if lowered:
            logging.info(
                "Batch norm momentum lowered to %.4f in %d layers for a run of %d steps",
                model_lib.batch_norm_momentum(total_steps),
                lowered,
                total_steps,
            )
    return model, warm


def _run(
    fn_args,
    config: TrainerConfig,
    model: keras.Model,
    strategy: tf.distribute.Strategy,
    sources: Sources,
    global_batch: int,
    inputs: model_input.ModelInput,
    seed: int,
    worker: tuple[int, int] = (1, 0),
) -> fitting.Run:
    """The input pipelines (of this worker's share), with what fit() needs beside them."""
    eval_steps = fn_args.eval_steps or None
    train_ds, eval_ds = datasets.make_datasets(
        config, (sources.train, sources.eval), global_batch, inputs, eval_steps, seed, worker
    )
    return fitting.Run(
        model,
        strategy,
        config,
        sources.train,
        sources.eval,
        train_ds,
        eval_ds,
        eval_steps,
        global_batch,
        fn_args.model_run_dir,
        chief=worker[1] == 0,
    )


def _export(
    trained: Trained,
    folder: str,
    config: TrainerConfig,
    labels: list[str],
    inputs: model_input.ModelInput,
    statistics_uri: str | None,
) -> None:
    """Writes the serving model into `folder` (export.py)."""
    export.export_serving_model(
        trained.model,
        folder,
        labels,
        inputs,
        config.feature_key_map,
        statistics_uri=statistics_uri,
        training=trained.training,
    )


def _publish(
    fn_args,
    config: TrainerConfig,
    labels: list[str],
    write: Callable[[str], None],
) -> image_stats.LabelAudit | None:
    """Publishes the serving model, which `write(folder)` writes into a local folder,
    into the model artifact; returns the candidate's label audit on the eval split
    (candidate_audit.py), run on the export.

    TFX's model artifact holds Format-Serving/ (fn_args.serving_model_dir) only. It is
    exported aside, then moved into place, so a retried Trainer never mixes exports, and
    a `write` that fails publishes nothing.
    """
    model_dir, serving_subdir = os.path.split(fn_args.serving_model_dir.rstrip("/"))
    examples_uri, eval_split = examples_uri_and_split(fn_args.eval_files[0])
    audits: list[image_stats.LabelAudit] = []  # the audit of the attempt published

    def export_and_audit(folder: str) -> None:
        with staging.local_folder(folder, "imgpipe-export-") as local:
            write(local)
            audits.append(
                candidate_audit.audit_candidate(
                    local, labels, examples_uri, eval_split, config.feature_key_map
                )
            )

    outputs.publish_folder(model_dir, serving_subdir, export_and_audit)
    return audits[-1] if audits else None


# --- several workers (trainer.workers > 1; docs/distributed-training.md) ----------------

# The workers' logs, in the model_run artifact.
WORKER_LOGS_DIR = "workers"
# The job's folder of workers elsewhere (a TFJob), in the model_run artifact while they run.
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
    Trainer's process prepared it (workers.py pickles it into the job's folder).

    Attributes:
      fn_args: the FnArgs fields the training reads (_WORKER_FN_ARGS).
      export_dir: where the chief exports the serving model.
      result_dir: where the chief writes its run summary.
    """

    fn_args: dict[str, Any]
    config: TrainerConfig
    labels: list[str]
    sources: Sources
    inputs: model_input.ModelInput
    export_dir: str
    result_dir: str
    timeouts: cluster.Timeouts = cluster.Timeouts()


def _train_on_workers(
    fn_args,
    config: TrainerConfig,
    labels: list[str],
    sources: Sources,
    inputs: model_input.ModelInput,
) -> None:
    """Trains on config.workers processes of this machine (workers.py), the chief
    exporting into the model artifact's work folder, which is published only once every
    worker has finished; then writes the run summary, and removes the backups.

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
        return workers_lib.assign_gpus(
            workers_lib.visible_gpu_ids(len(physical)), config.num_gpus, config.workers
        )

    launcher = launchers.launcher(local_gpus)
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

        audit = _publish(fn_args, config, labels, train)
        trained = summary_lib.read_if_present(result_dir)
    if trained is None:
        raise workers_lib.WorkersFailed(f"the chief worker wrote no summary into {result_dir}")
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
            train=_staged(job.sources.train, "train", stack),
            eval=_staged(job.sources.eval, "eval", stack),
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
        trained = fit_model(
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
        _export(trained, folder, job.config, job.labels, job.inputs, job.sources.statistics_uri)
        if member.chief:
            summary_lib.write(job.result_dir, trained.summary)


def _schedule(
    train_steps: int | None, records: int, global_batch: int, epochs: int, min_steps: int = 0
) -> tuple[int, int]:
    """(steps per epoch, epochs): TrainArgs.num_steps spread over the epochs, or one
    pass over the records per epoch when num_steps is unset, with epochs added until
    there are at least min_steps steps."""
    if train_steps:
        epochs = min(epochs, train_steps)
        return math.ceil(train_steps / epochs), epochs
    if records < global_batch:
        raise ValueError(
            f"{records} training records cannot fill one batch of "
            f"{global_batch}; set trainer.batch_size lower or trainer.train_steps"
        )
    steps_per_epoch = records // global_batch
    needed = math.ceil(min_steps / steps_per_epoch)
    if needed > epochs:
        logging.info(
            "%d epochs of %d steps fall short of min_train_steps %d: training %d epochs",
            epochs,
            steps_per_epoch,
            min_steps,
            needed,
        )
    return steps_per_epoch, max(epochs, needed)


def _callbacks(
    config: TrainerConfig,
    log_dir: str,
    stopping: keras.callbacks.EarlyStopping | None,
    backup: keras.callbacks.Callback,
) -> list[keras.callbacks.Callback]:
    """TensorBoard, early stopping, then the preemption backup, which saves early
    stopping's state of the epoch."""
    callbacks: list[keras.callbacks.Callback] = []
    if datasets.tensorboard_available():
        callbacks.append(keras.callbacks.TensorBoard(log_dir=log_dir, update_freq="epoch"))
    if stopping is not None:
        callbacks.append(stopping)
    callbacks.append(backup)
    return callbacks
