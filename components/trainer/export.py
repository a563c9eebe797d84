"""Exports the trained classifier as a SavedModel that takes encoded image bytes.

The signatures and their names are the serving contract in
components/common/formats/serving.py. The preprocessing inside is
`input.decode_batch(..., EVAL)`, the same function the eval input pipeline runs.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Mapping, Sequence
from typing import Any

import keras
import tensorflow as tf

from imgpipe.components.common.formats import label_map, layout, served_models
from imgpipe.components.common.formats.features import DEFAULT_KEY_MAP, FeatureKeyMap
from imgpipe.components.common.formats.serving import (
    CLASS_NAMES,
    EXAMPLES_INPUT,
    IMAGES_INPUT,
    PREDICTED_CLASS,
    PROBABILITIES,
    SERVING_DEFAULT,
    SERVING_EXAMPLES,
    ExamplesScorer,
)
from imgpipe.components.common.images import serving_limits
from imgpipe.components.common.images.model_input import ModelInput
from imgpipe.components.common.images.serving_limits import ServingLimits
from imgpipe.components.common.storage import fileio
from imgpipe.components.trainer import input as input_lib


def weight_shapes(model: keras.Model) -> list[list[int]]:
    """The shape of every weight, in order: the architecture a warm start must match."""
    return [[int(d) for d in w.shape] for w in model.weights]


def export_serving_model(
    model: keras.Model,
    export_dir: str,
    labels: Sequence[str],
    model_input: ModelInput,
    key_map: FeatureKeyMap = DEFAULT_KEY_MAP,
    statistics_uri: str | None = None,
    limits: ServingLimits = serving_limits.DEFAULT_LIMITS,
    training: Mapping[str, Any] | None = None,
) -> ExamplesScorer:
    """Writes the SavedModel to `export_dir`, with served_models.py's assets.extra/:
    the labels, the Keras weights (for a warm start) and the training data's
    image_stats.json (for drift).

    Args:
      model: the trained classifier.
      export_dir: e.g. fn_args.serving_model_dir; gs:// works.
      labels: class names in id order.
      model_input: the input side and eval center crop, and the normalization the
        signature applies when the model expects normalized float32 input.
      key_map: the feature layout serving_examples parses.
      statistics_uri: the ImageStatistics artifact of the training data, if any.
      limits: what serving_default refuses before decoding (serving_limits.py).
      training: what it was trained on (served_models.TRAINING_FILE: the digest from
        resume.training_digest, the spans, the main settings).

    Returns:
      The serving_examples function the SavedModel holds, to score with in this process
      (the candidate's label audit) without loading the export back.
    """
    score_examples = _write_signatures(model, export_dir, labels, model_input, key_map, limits)
    _write_assets_extra(model, export_dir, labels, statistics_uri, training)
    return score_examples


def _write_signatures(
    model: keras.Model,
    export_dir: str,
    labels: Sequence[str],
    model_input: ModelInput,
    key_map: FeatureKeyMap,
    limits: ServingLimits,
) -> ExamplesScorer:
    """The SavedModel: serving_default on encoded images (checked against `limits`)
    and serving_examples on tf.Examples, both decoding as the eval input does. Returns
    serving_examples."""
    class_names = tf.constant(list(labels), tf.string)
    image_size, crop_fraction = model_input.image_size, model_input.crop_fraction
    host_normalization = model_input.host_normalization

    # One function both signatures call: the decode and the model are traced, saved and
    # loaded once, not once a signature.
    @tf.function(input_signature=[tf.TensorSpec([None], tf.string)], autograph=False)
    def classify(encoded: tf.Tensor) -> dict[str, tf.Tensor]:
        images = input_lib.decode_batch(encoded, input_lib.EVAL, image_size, crop_fraction)
        if host_normalization is not None:
            images = input_lib.normalize(images, *host_normalization)
        probabilities = tf.cast(model(images, training=False), tf.float32)
        batch = tf.shape(probabilities)[0]
        return {
            PROBABILITIES: probabilities,
            CLASS_NAMES: tf.tile(class_names[tf.newaxis], [batch, 1]),
            PREDICTED_CLASS: tf.gather(class_names, tf.argmax(probabilities, axis=-1)),
        }

    def serve_images(images: tf.Tensor) -> dict[str, tf.Tensor]:
        return classify(serving_limits.checked(images, limits))

    def serve_examples(examples: tf.Tensor) -> dict[str, tf.Tensor]:
        parsed = tf.io.parse_example(
            examples, {key_map.encoded: tf.io.FixedLenFeature([], tf.string)}
        )
        return classify(parsed[key_map.encoded])

    archive = keras.export.ExportArchive()
    archive.track(model)
    archive.add_endpoint(
        SERVING_DEFAULT,
        serve_images,
        input_signature=[tf.TensorSpec([None], tf.string, name=IMAGES_INPUT)],
    )
    score_examples = archive.add_endpoint(
        SERVING_EXAMPLES,
        serve_examples,
        input_signature=[tf.TensorSpec([None], tf.string, name=EXAMPLES_INPUT)],
    )
    archive.write_out(export_dir, verbose=False)
    return score_examples


def _write_assets_extra(
    model: keras.Model,
    export_dir: str,
    labels: Sequence[str],
    statistics_uri: str | None,
    training: Mapping[str, Any] | None,
) -> None:
    """served_models.py's assets.extra/ beside the SavedModel: the labels, the weight
    shapes and weights, what it was trained on and the training data's image_stats.json."""
    extra = os.path.join(export_dir, served_models.ASSETS_EXTRA_DIR)
    fileio.makedirs(extra)
    label_map.write(extra, list(labels))
    fileio.write_text(
        os.path.join(extra, served_models.WEIGHT_SHAPES_FILE),
        json.dumps({"shapes": weight_shapes(model)}) + "\n",
    )
    with tempfile.TemporaryDirectory(prefix="imgpipe-export-") as local_dir:
        local = os.path.join(local_dir, served_models.WEIGHTS_FILE)
        model.save_weights(local)
        fileio.copy(local, os.path.join(extra, served_models.WEIGHTS_FILE), overwrite=True)
    if training:
        fileio.write_text(
            os.path.join(extra, served_models.TRAINING_FILE),
            json.dumps(dict(training), indent=2, sort_keys=True) + "\n",
        )
    if statistics_uri:
        fileio.copy(
            os.path.join(statistics_uri, layout.IMAGE_STATS_FILE),
            os.path.join(extra, layout.IMAGE_STATS_FILE),
            overwrite=True,
        )
