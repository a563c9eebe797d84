"""The classifier: the pixels its backbone expects, the backbone, a head sized from the labels.

Backbones (components/trainer/backbones.py) are built with `weights=None`, a local
weights file, or `imagenet` (which keras.applications downloads). With weights, the first
layer gives the backbone the pixels those weights were trained on; from scratch, the
training data's standardization. A warm start loads the served champion's weights.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterator, Sequence

import keras

from imgpipe.components.common.formats.serving import PROBABILITIES
from imgpipe.components.common.images.model_input import ModelInput
from imgpipe.components.common.storage import fileio
from imgpipe.components.trainer import backbones
from imgpipe.components.trainer import config as config_lib
from imgpipe.components.trainer.config import TrainerConfig

INPUT_NAME = "image"


@keras.saving.register_keras_serializable(package="imgpipe")
class CaffePixels(keras.layers.Layer):
    """RGB pixels (0..255) as keras.applications' ResNet `preprocess_input` makes them:
    BGR, the ImageNet mean subtracted, unscaled; in float32."""

    def __init__(self, **kwargs):
        kwargs.setdefault("dtype", "float32")
        super().__init__(**kwargs)

    def call(self, inputs):
        bgr = keras.ops.flip(keras.ops.cast(inputs, "float32"), axis=-1)
        return bgr - keras.ops.convert_to_tensor(backbones.CAFFE_MEAN_BGR)


@keras.saving.register_keras_serializable(package="imgpipe")
class FloatPixels(keras.layers.Layer):
    """RGB pixels (0..255) in float32, for a backbone whose own layers rescale them."""

    def __init__(self, **kwargs):
        kwargs.setdefault("dtype", "float32")
        super().__init__(**kwargs)

    def call(self, inputs):
        return keras.ops.cast(inputs, "float32")


@keras.saving.register_keras_serializable(package="imgpipe")
class Standardize(keras.layers.Layer):
    """(float(x) - mean) / std per channel, in float32 whatever the dtype policy.

    The model's first layer, so the input pipeline can feed uint8 batches.
    """

    def __init__(self, mean: Sequence[float], std: Sequence[float], **kwargs):
        kwargs.setdefault("dtype", "float32")
        super().__init__(**kwargs)
        self.mean = [float(v) for v in mean]
        self.std = [float(v) for v in std]

    def call(self, inputs):
        x = keras.ops.cast(inputs, "float32")
        return (x - keras.ops.convert_to_tensor(self.mean)) / keras.ops.convert_to_tensor(self.std)

    def get_config(self):
        return {**super().get_config(), "mean": self.mean, "std": self.std}


@contextlib.contextmanager
def _local_weights(path: str | None) -> Iterator[str | None]:
    """A local path of a weights file for the block (keras.applications reads local files
    only). A remote file is copied into a temporary folder, removed after the block."""
    if not path or path == config_lib.IMAGENET:
        yield path
        return
    if not fileio.exists(path):
        raise FileNotFoundError(f"backbone weights file {path} does not exist")
    if os.path.exists(path):
        yield path
        return
    with tempfile.TemporaryDirectory(prefix="imgpipe-weights-") as folder:
        local = os.path.join(folder, os.path.basename(path))
        fileio.copy(path, local)
        yield local


def build_model(
    config: TrainerConfig,
    num_classes: int,
    model_input: ModelInput,
    load_weights: bool = True,
) -> keras.Model:
    """The classifier for `num_classes` classes, under the current dtype policy.

    Args:
      config: backbone, weights, dropout.
      num_classes: the label count.
      model_input: the input side, and the normalization: a Standardize first layer
        taking uint8 images, unless the input pipeline normalizes (the model then takes
        float32).
      load_weights: False builds the model `config.weights` describes (its first layer
        and backbone layout) without loading them: for a warm start, whose weights come
        from the champion.

    Returns:
      An uncompiled keras.Model: images [B, S, S, 3] -> probabilities [B, num_classes]
      in float32 (the head stays float32 under mixed precision, for a stable softmax).
    """
    if num_classes < 2:
        raise ValueError(f"a classifier needs at least 2 classes, got {num_classes}")
    config = config.resolved()
    backbone = backbones.BACKBONES[config.backbone]
    shape = (model_input.image_size, model_input.image_size, 3)
    normalization = model_input.model_normalization
    keras.utils.set_random_seed(config.seed)
    inputs = keras.Input(shape, dtype="uint8" if normalization else "float32", name=INPUT_NAME)
    pretrained = bool(config.weights)
    first = _first_layer(backbone.convention(pretrained), normalization)
    x = first(inputs) if first is not None else inputs
    with _local_weights(config.weights if load_weights else None) as weights:
        try:
            net = backbone.build(shape, weights, config, pretrained)
        except (OSError, ValueError) as e:
            if not weights or weights == config_lib.IMAGENET:
                raise
            raise ValueError(
                f"backbone weights file {config.weights}: Keras cannot load it into "
                f"{config.backbone} ({' '.join(str(e).split())}); give trainer.weights a "
                f"weights file saved from a {config.backbone} model"
            ) from e
    x = net(x)
    if config.dropout:
        x = keras.layers.Dropout(config.dropout, name="head_dropout")(x)
    outputs = keras.layers.Dense(
        num_classes, activation="softmax", dtype="float32", name=PROBABILITIES
    )(x)
    return keras.Model(inputs, outputs, name=f"{config.backbone}_classifier")


def _first_layer(
    convention: str, normalization: tuple[Sequence[float], Sequence[float]] | None
) -> keras.layers.Layer | None:
    """The layer that gives the backbone its pixels; None where the input pipeline
    normalized them (normalize_on_host)."""
    if convention == backbones.CAFFE:
        return CaffePixels(name="caffe_pixels")
    if convention == backbones.IN_MODEL:
        return FloatPixels(name="float_pixels")
    if normalization:
        return Standardize(*normalization, name="standardize")
    return None


def backbone_of(model: keras.Model) -> keras.Model:
    """The backbone inside a classifier from build_model."""
    for layer in model.layers:
        if isinstance(layer, keras.Model):
            return layer
    raise ValueError(f"{model.name} has no backbone model inside")


def load_weights_file(model: keras.Model, path: str) -> None:
    """Loads a .weights.h5 file from any filesystem (Keras reads local files only)."""
    if os.path.exists(path):
        model.load_weights(path)
        return
    with tempfile.TemporaryDirectory(prefix="imgpipe-weights-") as local_dir:
        local = os.path.join(local_dir, os.path.basename(path))
        fileio.copy(path, local)
        model.load_weights(local)


def transfer_weights(source: keras.Model, target: keras.Model, include_head: bool) -> int:
    """Copies weights layer by layer between two classifiers of one architecture; the
    head (PROBABILITIES) only with include_head. Returns the layers copied.

    Raises:
      ValueError: the architectures differ (layer count or a weight shape).
    """
    if len(source.layers) != len(target.layers):
        raise ValueError(f"{len(source.layers)} layers vs {len(target.layers)}")
    copied = 0
    for theirs, ours in zip(source.layers, target.layers, strict=True):
        if ours.name == PROBABILITIES and not include_head:
            continue
        weights = theirs.get_weights()
        shapes = [w.shape for w in weights]
        expected = [tuple(w.shape) for w in ours.get_weights()]
        if [tuple(s) for s in shapes] != expected:
            raise ValueError(f"layer {ours.name}: weight shapes {shapes} vs {expected}")
        if weights:
            ours.set_weights(weights)
            copied += 1
    return copied


# Batch norm's moving statistics should average over about this fraction of a run, and
# over no fewer than MIN_BATCH_NORM_WINDOW steps.
BATCH_NORM_WINDOW_FRACTION = 0.1
MIN_BATCH_NORM_WINDOW = 10


def batch_norm_momentum(total_steps: int) -> float:
    """The momentum whose moving average spans BATCH_NORM_WINDOW_FRACTION of the run."""
    window = max(MIN_BATCH_NORM_WINDOW, total_steps * BATCH_NORM_WINDOW_FRACTION)
    return 1.0 - 1.0 / window


def fit_batch_norm_to_run(model: keras.Model, total_steps: int) -> int:
    """Lowers the momentum of batch norm layers whose moving statistics would not follow
    the weights within a run of `total_steps`; returns how many it lowered.

    Keras' MobileNetV3 uses momentum 0.999, an average over about 1,000 steps. A shorter
    run evaluates and serves with statistics still near their initial values. On the demo
    data, 64 steps of MobileNetV3Small with its own momentum gave every eval image the
    same prediction (accuracy 0.25, chance); with the fitted momentum, 0.64. Long runs
    keep the backbone's own momentum.
    """
    target = batch_norm_momentum(total_steps)
    lowered = 0
    for layer in _all_layers(model):
        if isinstance(layer, keras.layers.BatchNormalization) and layer.momentum > target:
            layer.momentum = target
            lowered += 1
    return lowered


def _all_layers(layer: keras.layers.Layer):
    for child in getattr(layer, "layers", ()):
        yield child
        yield from _all_layers(child)


def compile_model(
    model: keras.Model, config: TrainerConfig, total_steps: int, rate_factor: float = 1.0
) -> None:
    """AdamW with linear warm-up then cosine decay over `total_steps`, peaking at
    config.learning_rate x rate_factor."""
    warmup = int(total_steps * config.warmup_fraction)
    peak = config.learning_rate * rate_factor
    schedule = keras.optimizers.schedules.CosineDecay(
        initial_learning_rate=0.0 if warmup else peak,
        decay_steps=max(total_steps - warmup, 1),
        warmup_target=peak if warmup else None,
        warmup_steps=warmup,
    )
    model.compile(
        optimizer=keras.optimizers.AdamW(schedule, weight_decay=config.weight_decay),
        loss=_loss(config.label_smoothing, model.output_shape[-1]),
        metrics=[keras.metrics.SparseCategoricalAccuracy(name="accuracy")],
    )


def _loss(label_smoothing: float, num_classes: int):
    if not label_smoothing:
        return keras.losses.SparseCategoricalCrossentropy()

    # The sparse loss cannot smooth labels; smooth their one-hot form instead.
    def smoothed(y_true, y_pred):
        labels = keras.ops.cast(keras.ops.reshape(y_true, [-1]), "int32")
        return keras.losses.categorical_crossentropy(
            keras.ops.one_hot(labels, num_classes), y_pred, label_smoothing=label_smoothing
        )

    return smoothed
