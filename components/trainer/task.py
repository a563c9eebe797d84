"""The TFX Trainer entry point: `run_fn(fn_args)` trains, checkpoints and exports.

Reads the `Examples` artifact (shards, label map, conversion summary) and the
ImageStatistics artifact (mean and std), whose URI the ImageTrainer executor passes as
fn_args.custom_config["image_statistics_uri"]; resolves the model's input once, and the
window of spans to train on (window.py); then trains in this process (trainer.workers=1,
training.py) or on several workers (several_workers/: processes of this machine, a TFJob
of the Trainer pod's cluster, or containers on this machine's Docker engine), unless the
champion was trained on exactly that: then its model is published again (unchanged.py).
"""

from __future__ import annotations

import contextlib
import dataclasses
import os

import attr
from absl import logging

from imgpipe.components.common.formats import artifacts, image_stats, layout, manifest
from imgpipe.components.common.formats import champion as champion_lib
from imgpipe.components.common.images import model_input
from imgpipe.components.common.runtime import allocator
from imgpipe.components.common.storage import fileio, staging
from imgpipe.components.trainer import input as input_lib
from imgpipe.components.trainer import resume, training, unchanged
from imgpipe.components.trainer import window as window_lib
from imgpipe.components.trainer.config import (
    CHAMPION_URI_KEY,
    IMAGE_STATISTICS_URI_KEY,
    SPAN_ACCEPTED_KEY,
    SPAN_KEY,
    TrainerConfig,
    from_custom_config,
)
from imgpipe.components.trainer.several_workers import choice
from imgpipe.components.trainer.several_workers import job as job_lib


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
    examples_uri, train_split = training.examples_uri_and_split(fn_args.train_files[0])
    _, eval_split = training.examples_uri_and_split(fn_args.eval_files[0])
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
    span = custom_config.get(SPAN_KEY)
    accepted = bool(custom_config.get(SPAN_ACCEPTED_KEY))
    chosen = choose_window(config, resolved, span, labels, train_split, accepted)
    splits = (train_split, eval_split)
    sources = _sources(
        fn_args, config, examples_uri, splits, statistics_uri, resolved, chosen, len(labels)
    )
    twin = unchanged.champion_twin(resolved, sources.training_digest)
    if twin is not None:
        unchanged.publish_champion(fn_args, config, labels, twin, chosen)
        return
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
) -> training.Sources:
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
    return training.Sources(
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
    sources: training.Sources,
    splits: tuple[str, str],
    inputs: model_input.ModelInput,
) -> None:
    """Trains in this process (trainer.workers=1) or on workers, with the shards and the
    run's folder staged locally unless the workers are elsewhere."""
    train_split, eval_split = splits
    # Workers elsewhere (a TFJob's pods, containers) read the shards, and write the run's
    # files, themselves.
    elsewhere = config.workers > 1 and choice.launcher_name() != choice.PROCESSES
    with contextlib.ExitStack() as stack:
        if not elsewhere:
            train_source, eval_source = (
                training.staged(source, split, stack)
                for source, split in ((sources.train, train_split), (sources.eval, eval_split))
            )
            sources = dataclasses.replace(sources, train=train_source, eval=eval_source)
        run_dir = fn_args.model_run_dir
        if not elsewhere:
            run_dir = stack.enter_context(staging.local_folder(run_dir, "imgpipe-run-"))
        train = training.train_here if config.workers == 1 else job_lib.train_on_workers
        train(attr.evolve(fn_args, model_run_dir=run_dir), config, labels, sources, inputs)


def choose_window(
    config: TrainerConfig,
    resolved: champion_lib.Resolved | None,
    span: int | None,
    labels: list[str],
    train_split: str,
    span_accepted: bool = False,
) -> window_lib.Window:
    """The spans to train on (window.py), from the spans admitted beside the champion;
    `span_accepted`: this run's span passed its gates only by an acceptance."""
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
    chosen = window_lib.choose(admitted, span, labels, config.spans, missing, served, span_accepted)
    if damaged:  # a damaged record admits nothing, and says so
        unread = "span records not read: " + "; ".join(damaged)
        chosen = dataclasses.replace(
            chosen, note=f"{chosen.note}; {unread}" if chosen.note else unread
        )
    logging.info("Trainer: trains on %s", window_lib.describe(chosen))
    return chosen
