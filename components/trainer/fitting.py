"""fit() over the training phases, with preemption backups, resuming from one.

Each phase (`head` on a frozen backbone, then `full`) compiles a fresh AdamW whose
warm-up + cosine schedule runs on the optimizer's iterations. A backup (resume.py) holds
the weights with the optimizer's variables, iterations included, so a resumed phase
continues its schedule where it stopped; the phase index says which backbone layers
train; early stopping's counters and best weights carry over. A backup taken mid-epoch
resumes mid-epoch: one fit() finishes that epoch's remaining steps, the next one runs
the epochs left.
"""

from __future__ import annotations

import dataclasses
import os
import tempfile
from collections.abc import Callable, Sequence

import keras
import numpy as np
import tensorflow as tf
from absl import logging

from imgpipe.components.common.storage import fileio
from imgpipe.components.trainer import input as input_lib
from imgpipe.components.trainer import model as model_lib
from imgpipe.components.trainer import read_errors, resume
from imgpipe.components.trainer import summary as summary_lib
from imgpipe.components.trainer.config import TrainerConfig


class CarriedEarlyStopping(keras.callbacks.EarlyStopping):
    """EarlyStopping on val_loss, best weights restored at the phase's end, whose state
    carries over between the fit() calls of one phase and from a backup."""

    def __init__(self, patience: int):
        super().__init__(monitor="val_loss", patience=patience, restore_best_weights=True)
        self._carried: tuple[resume.EarlyStoppingState, list[np.ndarray] | None] | None = None
        self.last_segment = True

    @property
    def stopped(self) -> bool:
        return self.stopped_epoch > 0

    def state(self) -> resume.EarlyStoppingState:
        best = None if self.best is None else float(self.best)
        return resume.EarlyStoppingState(
            int(self.wait), best, int(self.best_epoch), int(self.stopped_epoch)
        )

    def carry(self, state: resume.EarlyStoppingState, best_weights: list[np.ndarray] | None):
        """Takes this state at the next on_train_begin, instead of starting over."""
        self._carried = (state, best_weights)
        self.stopped_epoch = state.stopped_epoch

    def on_train_begin(self, logs=None):
        super().on_train_begin(logs)
        if self._carried is not None:
            state, self.best_weights = self._carried
            self.wait, self.best = state.wait, state.best
            self.best_epoch, self.stopped_epoch = state.best_epoch, state.stopped_epoch
            self._carried = None

    def on_train_end(self, logs=None):
        if self.last_segment or self.stopped:
            super().on_train_end(logs)
        else:
            self.carry(self.state(), self.best_weights)

    def finish(self, model: keras.Model) -> None:
        """What the phase's last on_train_end does, for a phase resumed at its end."""
        self.set_model(model)
        self.on_train_begin()
        self.last_segment = True
        self.on_train_end()


class Backup(keras.callbacks.Callback):
    """Publishes a backup (resume.publish) at each epoch's end and, with every_steps,
    every that many optimizer steps within an epoch. Goes after early stopping in the
    callback list, so that an epoch's backup holds early stopping's update.

    With several workers, every worker saves its weights at the same steps (a save may
    read variables through collectives every worker must join), and only the chief
    (`publish`) publishes; the others' saves go to temporary folders, removed at once.
    """

    def __init__(
        self,
        folder: str,
        base: resume.BackupState,
        progress: list[resume.PhaseProgress],
        every_steps: int | None,
        early_stopping: CarriedEarlyStopping | None,
        publish: bool = True,
    ):
        super().__init__()
        self.folder = folder
        self.base = base
        self.progress = progress
        self.every_steps = every_steps
        self.early_stopping = early_stopping
        self.publish = publish

    def _steps(self) -> int:
        return int(keras.ops.convert_to_numpy(self.model.optimizer.iterations))

    def on_train_batch_end(self, batch, logs=None):
        steps = self._steps()
        if self.every_steps and not steps % self.every_steps and steps % self._per_epoch:
            self.save(steps)

    @property
    def _per_epoch(self) -> int:
        return self.base.plan.steps_per_epoch

    def on_epoch_end(self, epoch, logs=None):
        steps = self._steps()
        done = self.progress[self.base.phase]
        accuracy = (logs or {}).get("val_accuracy")
        best = done.val_accuracy
        if accuracy is not None:
            best = float(accuracy) if best is None else max(best, float(accuracy))
        self.progress[self.base.phase] = resume.PhaseProgress(done.epochs_run + 1, steps, best)
        self.save(steps)

    def save(self, steps: int) -> None:
        """Publishes a backup; one that fails is logged, and training goes on."""
        phase = self.base.phase
        self.progress[phase] = dataclasses.replace(self.progress[phase], optimizer_steps=steps)
        stopping = self.early_stopping
        try:
            with tempfile.TemporaryDirectory(prefix="imgpipe-backup-") as local:
                files = {resume.WEIGHTS_FILE: os.path.join(local, resume.WEIGHTS_FILE)}
                self.model.save_weights(files[resume.WEIGHTS_FILE])
                if not self.publish:
                    return
                if stopping is not None and stopping.best_weights is not None:
                    best = os.path.join(local, resume.BEST_WEIGHTS_FILE)
                    files[resume.BEST_WEIGHTS_FILE] = best
                    np.savez(best, *stopping.best_weights)
                state = dataclasses.replace(
                    self.base,
                    optimizer_steps=steps,
                    progress=tuple(self.progress),
                    early_stopping=stopping.state() if stopping is not None else None,
                )
                path = resume.publish(self.folder, state, files)
        except (OSError, ValueError, tf.errors.OpError) as e:
            logging.warning("Preemption backup at step %d failed (%s): going on", steps, e)
            return
        logging.info("Preemption backup: %s", path)


def restore(model: keras.Model, path: str) -> list[np.ndarray] | None:
    """Loads a backup's weights and optimizer variables into `model`, compiled for the
    backup's phase; returns early stopping's best weights, if the backup has them."""
    if not model.optimizer.built:
        model.optimizer.build(model.trainable_variables)
    model_lib.load_weights_file(model, os.path.join(path, resume.WEIGHTS_FILE))
    best = os.path.join(path, resume.BEST_WEIGHTS_FILE)
    if not fileio.exists(best):
        return None
    with tempfile.TemporaryDirectory(prefix="imgpipe-backup-") as local:
        copy = os.path.join(local, resume.BEST_WEIGHTS_FILE)
        fileio.copy(best, copy)
        with np.load(copy) as arrays:
            return [arrays[f"arr_{i}"] for i in range(len(arrays.files))]


@dataclasses.dataclass(frozen=True)
class Run:
    """What fit() needs beside the phases."""

    model: keras.Model
    strategy: tf.distribute.Strategy
    config: TrainerConfig
    train: input_lib.SplitSource
    eval: input_lib.SplitSource
    train_ds: tf.data.Dataset
    eval_ds: tf.data.Dataset
    eval_steps: int | None
    global_batch: int
    model_run_dir: str
    # False on a worker other than the chief: its backups are not published.
    chief: bool = True


# (log_dir, early stopping or None, backup) -> the phase's callbacks
MakeCallbacks = Callable[[str, CarriedEarlyStopping | None, Backup], list[keras.callbacks.Callback]]


def compile_phase(
    model: keras.Model,
    strategy: tf.distribute.Strategy,
    config: TrainerConfig,
    phase: summary_lib.Phase,
    steps_per_epoch: int,
) -> None:
    """Sets which layers the phase trains, and compiles a fresh optimizer whose
    schedule spans the phase."""
    model_lib.backbone_of(model).trainable = phase.backbone_trainable
    with strategy.scope():
        model_lib.compile_model(
            model,
            config,
            steps_per_epoch * phase.epochs,
            phase.peak_learning_rate / config.learning_rate,
        )


def start_from(
    model: keras.Model,
    strategy: tf.distribute.Strategy,
    config: TrainerConfig,
    phases: Sequence[summary_lib.Phase],
    found: resume.Found,
) -> tuple[resume.Found, list[np.ndarray] | None]:
    """Loads the backup `found` names into `model`, compiled for the backup's phase.

    A backup that failed its checks, or does not load, is dropped with one warning
    line: the model keeps (or gets back) its initial weights and training starts
    afresh. Returns what training starts from, and early stopping's best weights.
    """
    if found.state is None:
        if found.path is not None:
            logging.warning("Preemption backup: %s", found.note)
        else:
            logging.info("Preemption backup: %s", found.note)
        return found, None
    assert found.path is not None
    initial = model.get_weights()
    try:
        compile_phase(
            model, strategy, config, phases[found.state.phase], found.state.plan.steps_per_epoch
        )
        with strategy.scope():
            best = restore(model, found.path)
    except (ValueError, OSError) as e:
        model.set_weights(initial)
        dropped = resume.Found(
            None, found.path, f"the backup {found.path} does not load ({e}): training starts afresh"
        )
        logging.warning("Preemption backup: %s", dropped.note)
        return dropped, None
    logging.info("Preemption backup: %s", found.note)
    return found, best


def fit_phases(
    run: Run,
    phases: Sequence[summary_lib.Phase],
    backups: tuple[str, resume.BackupState],
    start: tuple[resume.BackupState | None, list[np.ndarray] | None],
    make_callbacks: MakeCallbacks,
    first_callbacks: Sequence[keras.callbacks.Callback] = (),
) -> list[resume.PhaseProgress]:
    """Runs the phases from the start, or from a backup loaded by start_from; returns
    each begun phase's progress.

    Args:
      backups: the training's backup folder, and the fingerprint, plan and data seed
        its backups record (the phase and steps are filled in).
      start: the loaded backup's state and early stopping's best weights, or Nones.
      make_callbacks: the callbacks of one phase, given its log folder, its early
        stopping and its backup, which it must place after early stopping.
      first_callbacks: callbacks for the first fit() only (the TensorBoard samples).
    """
    folder, base = backups
    state, best_weights = start
    progress = list(state.progress) if state is not None else []
    steps_per_epoch = base.plan.steps_per_epoch
    first_epoch = 0
    extra = list(first_callbacks)
    for index, phase in enumerate(phases):
        resumed = state is not None and index == state.phase
        if state is not None and index < state.phase:
            first_epoch += phase.epochs
            continue
        if not resumed:
            compile_phase(run.model, run.strategy, run.config, phase, steps_per_epoch)
            progress.append(resume.PhaseProgress())
        stopping = None
        if run.config.early_stopping_patience:
            stopping = CarriedEarlyStopping(run.config.early_stopping_patience)
            if resumed and state is not None and state.early_stopping is not None:
                stopping.carry(state.early_stopping, best_weights)
        backup = Backup(
            folder,
            dataclasses.replace(base, phase=index),
            progress,
            run.config.backup_every_steps,
            stopping,
            publish=run.chief,
        )
        callbacks = extra + make_callbacks(
            os.path.join(run.model_run_dir, phase.name), stopping, backup
        )
        extra = []
        steps = state.optimizer_steps if resumed and state is not None else 0
        _fit_segments(run, phase, steps_per_epoch, first_epoch, steps, callbacks, stopping)
        first_epoch += phase.epochs
    model_lib.backbone_of(run.model).trainable = True
    return progress


def _fit_segments(
    run: Run,
    phase: summary_lib.Phase,
    steps_per_epoch: int,
    first_epoch: int,
    start: int,
    callbacks: list[keras.callbacks.Callback],
    stopping: CarriedEarlyStopping | None,
) -> None:
    parts = resume.segments(start, steps_per_epoch, first_epoch, phase.epochs)
    if stopping is not None and stopping.stopped:
        parts = []
    logging.info(
        "Training %s, phase %s: %d epochs x %d steps%s, global batch %d, peak rate %g%s",
        run.model.name,
        phase.name,
        phase.epochs,
        steps_per_epoch,
        f", from optimizer step {start}" if start else "",
        run.global_batch,
        phase.peak_learning_rate,
        "" if phase.backbone_trainable else ", backbone frozen",
    )
    for number, part in enumerate(parts):
        if stopping is not None:
            stopping.last_segment = number == len(parts) - 1
        with read_errors.named_read_errors(run.train, run.eval):
            run.model.fit(
                run.train_ds,
                initial_epoch=part.initial_epoch,
                epochs=part.epochs,
                steps_per_epoch=part.steps_per_epoch,
                validation_data=run.eval_ds,
                validation_steps=run.eval_steps,
                callbacks=callbacks,
                verbose=2,
            )
        if stopping is not None and stopping.stopped:
            break
    if not parts and stopping is not None:
        stopping.finish(run.model)
