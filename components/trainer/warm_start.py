"""Warm start: a retrain begins from the served champion's weights.

The champion is the one the run resolved (components/common/formats/champion.py: the
newest sound push, every byte checksummed); its Keras weights are in
assets.extra. Same labels and architecture: every weight, head included. Other labels:
the backbone, with a fresh head. No champion, no weights file, another architecture,
or a serving directory that cannot be read: a fresh model. Damaged pushes passed over
are named in the note. Each outcome is logged and recorded in the training summary.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import keras
from absl import logging

from imgpipe.components.common.formats import champion as champion_lib
from imgpipe.components.common.formats import served_models
from imgpipe.components.common.images.model_input import ModelInput
from imgpipe.components.trainer import export
from imgpipe.components.trainer import model as model_lib
from imgpipe.components.trainer.config import TrainerConfig

# Outcomes.
OFF = "off"
FULL = "full"  # every weight, head included
BACKBONE_ONLY = "backbone_only"  # other labels: a fresh head
FRESH = "fresh"  # asked for, but nothing usable: a fresh model


@dataclasses.dataclass(frozen=True)
class WarmStart:
    status: str
    note: str
    champion: str | None = None

    @property
    def head_trained(self) -> bool:
        return self.status == FULL

    @property
    def backbone_trained(self) -> bool:
        return self.status in (FULL, BACKBONE_ONLY)


def apply(
    model: keras.Model,
    config: TrainerConfig,
    labels: Sequence[str],
    resolved: champion_lib.Resolved | None,
    model_input: ModelInput,
) -> WarmStart:
    """Loads the resolved champion's weights into `model` (built by build_model) as far
    as they fit; returns what was done. Call inside the distribution strategy's scope."""
    if not config.warm_start:
        return WarmStart(OFF, "warm_start is off")
    if resolved is None:
        return _log(WarmStart(FRESH, "no champion was resolved for this run: fresh"))
    if resolved.status == champion_lib.UNREADABLE:
        return _log(WarmStart(FRESH, f"{resolved.reason}: fresh"))
    lookup = resolved.lookup()
    warm = _from(lookup, model, config, labels, model_input)
    if lookup.note:
        warm = dataclasses.replace(warm, note=f"{warm.note} ({lookup.note})")
    return _log(warm)


def _from(
    lookup: served_models.Lookup,
    model: keras.Model,
    config: TrainerConfig,
    labels: Sequence[str],
    model_input: ModelInput,
) -> WarmStart:
    champion = lookup.model
    if champion is None:
        return WarmStart(FRESH, f"no champion in {lookup.serving_dir or '(none set)'}: fresh")
    weights = champion.weights_path
    if weights is None:
        return WarmStart(
            FRESH, f"champion {champion.path} has no weights file: fresh", champion.path
        )
    same_labels = list(champion.labels) == list(labels)
    try:
        source = model_lib.build_model(
            config, len(champion.labels), model_input, load_weights=False
        )
        # Keras loads what matches and warns about the rest: compare architectures first.
        if champion.weight_shapes() != export.weight_shapes(source):
            raise ValueError("another architecture")
        model_lib.load_weights_file(source, weights)
        model_lib.transfer_weights(source, model, include_head=same_labels)
    except (ValueError, OSError) as e:
        return WarmStart(
            FRESH, f"champion {champion.path} does not fit this model ({e}): fresh", champion.path
        )
    if same_labels:
        return WarmStart(FULL, f"from champion {champion.path}", champion.path)
    return WarmStart(
        BACKBONE_ONLY,
        f"from champion {champion.path}, with a fresh head: its labels "
        f"{list(champion.labels)} differ from {list(labels)}",
        champion.path,
    )


def _log(warm: WarmStart) -> WarmStart:
    logging.info("Warm start: %s", warm.note)
    return warm
