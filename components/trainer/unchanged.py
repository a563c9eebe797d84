"""A run with nothing new: the champion's own model, published again instead of its twin.

A candidate trained on the same spans' Examples with the same settings as the champion
(the same resume.training_digest, recorded in its served_models.TRAINING_FILE) has
nothing new to offer: the Evaluator refuses it ("nothing new") whatever it scores. A
recurring run whose schedule fired with no new span would still pay a whole training to
be told so. Instead the Trainer publishes the champion's model files as its own, the
Evaluator finds the two the same and refuses the push in seconds, and the run summary
says why nothing was trained.
"""

from __future__ import annotations

import posixpath

from absl import logging

from imgpipe.components.common.formats import champion as champion_lib
from imgpipe.components.common.formats import manifest, served_models
from imgpipe.components.common.storage import fileio
from imgpipe.components.trainer import summary as summary_lib
from imgpipe.components.trainer import training, warm_start
from imgpipe.components.trainer import window as window_lib
from imgpipe.components.trainer.config import TrainerConfig

# What a push adds to the Trainer's export (the Pusher): not part of a model the Trainer
# publishes.
_PUSH_ONLY = (served_models.MANIFEST_FILE, served_models.PUSH_COMPLETE_FILE)
_CHUNK_BYTES = 4 * 1024 * 1024


def champion_twin(
    resolved: champion_lib.Resolved | None, training_digest: str
) -> served_models.ServedModel | None:
    """The champion when it was trained on what this run would train on, else None."""
    champion = resolved.model if resolved is not None else None
    if champion is None:
        return None
    try:
        theirs = champion.training().get("digest")
    except (OSError, ValueError) as e:  # an unreadable record: train, as without one
        logging.warning("Trainer: the champion's training record was not read: %s", e)
        return None
    return champion if theirs and theirs == training_digest else None


def model_files(champion: served_models.ServedModel) -> list[str]:
    """The champion's files as the Trainer exported them: without what its push added."""
    return [
        relpath
        for relpath in fileio.list_files(champion.path)
        if relpath not in _PUSH_ONLY and not relpath.startswith(served_models.REFERENCE_ASSET + "/")
    ]


def copy_checked(
    source_dir: str, target_dir: str, relpath: str, entry: manifest.FileEntry | None
) -> None:
    """Copies one file, checksumming the bytes as they go, against its manifest entry."""
    target = posixpath.join(target_dir, relpath)
    if fileio.is_local(target):
        fileio.makedirs(posixpath.dirname(target))
    checksum = manifest.Checksum()
    with (
        fileio.open_file(posixpath.join(source_dir, relpath), "rb") as source,
        fileio.open_file(target, "wb") as out,
    ):
        while chunk := source.read(_CHUNK_BYTES):
            checksum.update(chunk)
            out.write(chunk)
    copied = checksum.entry()
    if entry is not None and (copied.size, copied.crc32c) != (entry.size, entry.crc32c):
        raise OSError(
            f"{posixpath.join(source_dir, relpath)} read as {copied.size} bytes, CRC-32C "
            f"{copied.crc32c}, but its manifest says {entry.size} bytes, {entry.crc32c}: "
            "the champion changed after its push; the next run passes over it and trains"
        )


def publish_champion(
    fn_args,
    config: TrainerConfig,
    labels: list[str],
    champion: served_models.ServedModel,
    window: window_lib.Window,
) -> None:
    """Publishes the champion's model as this run's, with its label audit and a summary
    that says it was not trained and why."""
    files = model_files(champion)
    # A push from before manifests has none to check its copy against.
    has_manifest = fileio.exists(posixpath.join(champion.path, served_models.MANIFEST_FILE))
    listed = manifest.read(champion.path).files if has_manifest else {}

    def copy(folder: str) -> None:
        for relpath in files:
            copy_checked(champion.path, folder, relpath, listed.get(relpath))

    audit = training.publish(fn_args, config, labels, copy)
    reason = (
        f"nothing new since champion {champion.version}: the same spans' data and the "
        "same settings, so its model is this run's"
    )
    summary_lib.write(
        fn_args.model_run_dir,
        summary_lib.TrainingSummary(
            backbone=config.backbone,
            image_size=config.input_size,
            weights=config.weights,
            warm_start=warm_start.OFF,
            warm_start_note="not trained: nothing new",
            steps_per_epoch=0,
            phases=(),
            label_audit=audit,
            window=window_lib.describe(window),
            not_trained=reason,
        ),
    )
    logging.info("Trainer: %s", reason)
