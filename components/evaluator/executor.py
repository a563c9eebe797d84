"""ImageEvaluator's executor: validates, finds the champion, evaluates both, decides."""

from __future__ import annotations

import contextlib
import dataclasses
import os
import tempfile
from collections.abc import Callable
from typing import Any

import numpy as np
import tensorflow as tf
from absl import logging
from tfx import types
from tfx.dsl.components.base import base_executor
from tfx.types import artifact_utils
from tfx.utils import path_utils

from imgpipe.components.common import (
    artifacts,
    config_loader,
    fileio,
    manifest,
    served_models,
    serving_lock,
    staging,
)
from imgpipe.components.common.features import DEFAULT_KEY_MAP
from imgpipe.components.common.serving import EXAMPLES_INPUT, PROBABILITIES, SERVING_EXAMPLES
from imgpipe.components.evaluator import blessing as blessing_lib
from imgpipe.components.evaluator import evaluation as ev
from imgpipe.components.evaluator import spec
from imgpipe.components.evaluator.config import EvaluatorConfig

EVAL_BATCH_SIZE = 64

Predict = Callable[[tf.Tensor], np.ndarray]


def config_from_properties(exec_properties: dict[str, Any]) -> EvaluatorConfig:
    """The blessing rules, the tolerance property applied.

    Raises:
      ValueError: a bad setting, named.
    """
    config = config_loader.from_json(EvaluatorConfig, exec_properties[spec.EVALUATOR_CONFIG_KEY])
    tolerance = exec_properties.get(spec.TOLERANCE_KEY)
    if tolerance is not None:
        config = dataclasses.replace(config, tolerance=float(tolerance))
    config.validate()
    return config


def _predictor(model_dir: str) -> Predict:
    signature = tf.saved_model.load(model_dir).signatures[SERVING_EXAMPLES]

    def predict(serialized: tf.Tensor) -> np.ndarray:
        return np.argmax(signature(**{EXAMPLES_INPUT: serialized})[PROBABILITIES].numpy(), -1)

    return predict


def confusion_matrices(
    shards: list[str], num_classes: int, predictors: list[Predict]
) -> list[np.ndarray]:
    """One [true, predicted] count matrix per predictor, over the same records."""
    compression = {artifacts.shard_compression(s) for s in shards}.pop()
    records = tf.data.TFRecordDataset(shards, compression).batch(EVAL_BATCH_SIZE)
    matrices: list[np.ndarray] = [
        np.zeros((num_classes, num_classes), np.int64) for _ in predictors
    ]
    features = {DEFAULT_KEY_MAP.label: tf.io.FixedLenFeature([], tf.int64)}
    for serialized in records:
        labels = tf.io.parse_example(serialized, features)[DEFAULT_KEY_MAP.label].numpy()
        if labels.size and (labels.min() < 0 or labels.max() >= num_classes):
            raise ValueError(
                f"label ids {sorted(set(labels.tolist()))} do not fit {num_classes} classes"
            )
        for matrix, predict in zip(matrices, predictors, strict=True):
            np.add.at(matrix, (labels, predict(serialized)), 1)
    return matrices


def metrics_from_confusion(labels: list[str], matrix: np.ndarray) -> ev.ModelMetrics:
    return ev.ModelMetrics.of(
        tuple(
            ev.ClassMetrics(
                label=label,
                examples=int(matrix[i].sum()),
                correct=int(matrix[i, i]),
                predicted=int(matrix[:, i].sum()),
            )
            for i, label in enumerate(labels)
        )
    )


def find_champion(
    config: EvaluatorConfig, lookup: served_models.Lookup, labels: list[str]
) -> ev.Champion:
    """The champion to compare with, or why there is none (metrics are filled later);
    its note names every damaged push passed over (served_models.Lookup.note)."""
    if not config.compare_with_champion:
        return ev.Champion(ev.NOT_COMPARED, "evaluator.compare_with_champion is false")
    served = lookup.model
    if served is None:
        if lookup.passed:
            return ev.Champion(ev.UNREADABLE, lookup.note)
        return ev.Champion(
            ev.NO_CHAMPION, f"no complete push in {lookup.serving_dir or '(none set)'} yet"
        )
    if list(served.labels) != labels:
        return ev.Champion(
            ev.LABELS_DIFFER,
            "; ".join(
                filter(
                    None,
                    [
                        lookup.note,
                        f"the champion has labels {list(served.labels)}, the candidate "
                        f"{labels}: not comparable",
                    ],
                )
            ),
            served.path,
            served.version,
        )
    return ev.Champion(ev.COMPARED, lookup.note, served.path, served.version)


def look_up(serving_dir: str, checksums: bool) -> served_models.Lookup | ev.Champion:
    """The serving directory's pushes, every byte checksummed when the blessing rests on
    them; an unreadable directory as the champion's status."""
    try:
        return served_models.find(serving_dir, checksums=checksums)
    except (OSError, ValueError, KeyError, tf.errors.OpError) as e:
        return ev.Champion(ev.UNREADABLE, f"the serving directory {serving_dir} is unreadable: {e}")


class Executor(base_executor.BaseExecutor):
    """Keys: inputs `examples`, `model`; outputs `evaluation`, `blessing`; parameters
    `evaluator_config` (EvaluatorConfig JSON), `tolerance`, `serving_dir`, `eval_split`."""

    def Do(  # noqa: N802 - TFX's executor interface
        self,
        input_dict: dict[str, list[types.Artifact]],
        output_dict: dict[str, list[types.Artifact]],
        exec_properties: dict[str, Any],
    ) -> None:
        config = config_from_properties(exec_properties)
        examples = artifact_utils.get_single_instance(input_dict[spec.EXAMPLES_KEY])
        model = artifact_utils.get_single_instance(input_dict[spec.MODEL_KEY])
        # Outputs a killed or retried step left incomplete fail here, the file named.
        manifest.verify(examples.uri)
        manifest.verify(model.uri)
        evaluation_out = artifact_utils.get_single_instance(output_dict[spec.EVALUATION_KEY])
        blessing_out = artifact_utils.get_single_instance(output_dict[spec.BLESSING_KEY])
        eval_split = exec_properties.get(spec.EVAL_SPLIT_KEY) or ""
        serving_dir = exec_properties.get(spec.SERVING_DIR_KEY) or ""
        splits = artifact_utils.decode_split_names(examples.split_names)
        if eval_split not in splits:
            raise ValueError(f"{examples.uri} has no split {eval_split!r}; it has {splits}")
        shards = fileio.glob(artifacts.split_shard_pattern(examples.uri, eval_split))
        if not shards:
            raise FileNotFoundError(f"no shards in {artifacts.split_dir(examples.uri, eval_split)}")
        labels = artifacts.load_labels(examples.uri)
        candidate_dir = path_utils.serving_model_path(model.uri)
        candidate_labels = list(served_models.read_labels(candidate_dir))
        if candidate_labels != labels:
            raise ValueError(
                f"the model {candidate_dir} was trained on labels {candidate_labels}, "
                f"the examples {examples.uri} have {labels}"
            )

        lease = serving_lock.acquire(serving_dir, model.uri) if serving_dir else None
        try:
            self._decide(
                config,
                examples.uri,
                eval_split,
                shards,
                labels,
                candidate_dir,
                serving_dir,
                lease,
                evaluation_out,
                blessing_out,
            )
        except BaseException:
            if lease is not None:
                serving_lock.release(serving_dir, lease.token)
            raise

    def _decide(
        self,
        config: EvaluatorConfig,
        examples_uri: str,
        eval_split: str,
        shards: list[str],
        labels: list[str],
        candidate_dir: str,
        serving_dir: str,
        lease: serving_lock.Lease | None,
        evaluation_out: types.Artifact,
        blessing_out: types.Artifact,
    ) -> None:
        """Picks the champion, evaluates both, writes the decision; gives the lease back
        unless the Pusher is to push (it gives it back then)."""
        lookup = look_up(serving_dir, checksums=config.compare_with_champion)
        head = None
        if isinstance(lookup, ev.Champion):
            champion = lookup
        else:
            champion = find_champion(config, lookup, labels)
            head = lookup.head
        with contextlib.ExitStack() as local:
            # TensorFlow reads these: object-store copies are made local first.
            shards = list(
                staging.stage_files(
                    shards,
                    local.enter_context(tempfile.TemporaryDirectory(prefix="imgpipe-eval-")),
                    f"{examples_uri} split {eval_split!r}",
                )
            )
            predictors = [_predictor(local.enter_context(staging.local_copy(candidate_dir)))]
            if champion.status == ev.COMPARED:
                try:
                    champion_dir = local.enter_context(staging.local_copy(champion.path or ""))
                    predictors.append(_predictor(champion_dir))
                except (OSError, ValueError, KeyError, tf.errors.OpError) as e:
                    champion = dataclasses.replace(
                        champion, status=ev.UNREADABLE, note=f"the champion did not load: {e}"
                    )
            matrices = confusion_matrices(shards, len(labels), predictors)
        candidate = metrics_from_confusion(labels, matrices[0])
        if len(matrices) > 1:
            champion = dataclasses.replace(
                champion, metrics=metrics_from_confusion(labels, matrices[1])
            )
        decision = blessing_lib.decide(candidate, champion, config)
        majority_label, majority_rate = blessing_lib.majority(candidate)
        result = ev.Evaluation(
            eval_split=eval_split,
            majority_label=majority_label,
            majority_rate=majority_rate,
            required_accuracy=blessing_lib.required_accuracy(candidate, config),
            candidate=candidate,
            champion=champion,
            decision=decision,
        )
        ev.write(evaluation_out.uri, result)
        fileio.makedirs(blessing_out.uri)
        marker = spec.BLESSED_FILE if decision.blessed else spec.NOT_BLESSED_FILE
        fileio.write_text(os.path.join(blessing_out.uri, marker), "")
        blessing_out.set_int_custom_property(spec.BLESSED_PROPERTY, int(decision.blessed))
        blessing_out.set_string_custom_property(spec.REASON_PROPERTY, decision.reason)
        if champion.version is not None:
            blessing_out.set_int_custom_property(spec.CHAMPION_PROPERTY, champion.version)
        if lease is not None:
            if not isinstance(lookup, ev.Champion):  # the Pusher's compare-and-swap
                blessing_out.set_int_custom_property(
                    serving_lock.SERVING_HEAD_PROPERTY,
                    serving_lock.NO_HEAD if head is None else head,
                )
            if decision.blessed:
                blessing_out.set_string_custom_property(serving_lock.LEASE_PROPERTY, lease.token)
            else:
                serving_lock.release(serving_dir, lease.token)
        logging.info("ImageEvaluator: %s", decision.reason)
        if champion.note:
            logging.info("ImageEvaluator: champion: %s", champion.note)
