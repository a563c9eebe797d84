"""The backbone table: each backbone's builder and its facts, in one entry.

A backbone is added here and nowhere else: the config's choices, its checks (which
options apply, which backbones have ImageNet weights), the model's first layer and the
tests all read this table.

The facts:
  native_size  the side its ImageNet weights were trained at; `image_size: null` uses
               it (tiny_cnn: a small side that trains fast on a CPU).
  options      the TrainerConfig fields, beyond the common ones, that change it.
  pixels       what its pretrained weights expect to see, applied whenever weights are
               loaded (`weights: imagenet` or a file): IN_MODEL, keras' own preprocessing
               layers built into the backbone (include_preprocessing); CAFFE, BGR with
               the ImageNet mean subtracted and no scaling (keras' `preprocess_input`
               for ResNet); STANDARDIZED, the training data's own mean and std (from
               ImageStatistics), which is also what every backbone trained from scratch
               sees.
  family       the keras.applications module whose `preprocess_input` documents the
               convention (the tests compare against it).

No Keras at import: the config reads the table, and the CLI loads without TensorFlow.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import keras

MOBILENET_V3_SMALL = "mobilenet_v3_small"
EFFICIENTNET_V2_B0 = "efficientnet_v2_b0"
EFFICIENTNET_V2_S = "efficientnet_v2_s"
RESNET50 = "resnet50"
TINY_CNN = "tiny_cnn"

IN_MODEL = "in_model"
CAFFE = "caffe"
STANDARDIZED = "standardized"

# keras.applications' ResNet `preprocess_input` (mode "caffe"): the ImageNet mean, BGR.
CAFFE_MEAN_BGR = (103.939, 116.779, 123.68)

# build(shape, weights, config, pretrained): weights is None, "imagenet" or a local file;
# pretrained lays the backbone out as its pretrained weights expect (keras' own
# preprocessing layers included), whether or not `weights` loads them here.
# The config is a TrainerConfig, which reads this table: Any here, so neither imports the
# other's module both ways.
Builder = Callable[[tuple[int, int, int], "str | None", Any, bool], "keras.Model"]


@dataclasses.dataclass(frozen=True)
class Backbone:
    """One entry of the table (see the module's docstring for the facts)."""

    name: str
    build: Builder
    native_size: int
    pixels: str
    family: str | None
    imagenet: bool
    options: frozenset[str] = frozenset()

    def convention(self, pretrained: bool) -> str:
        """The pixels the backbone is fed: its own convention with loaded weights, the
        data's standardization from scratch."""
        return self.pixels if pretrained else STANDARDIZED


def _mobilenet_v3_small(shape, weights, config, pretrained):
    import keras

    return keras.applications.MobileNetV3Small(
        input_shape=shape,
        alpha=config.width_multiplier,
        include_top=False,
        weights=weights,
        pooling="avg",
        include_preprocessing=pretrained,
    )


def _efficientnet_v2(constructor: str) -> Builder:
    """A builder of keras.applications' EfficientNetV2 `constructor` (B0, S, ...)."""

    def build(shape, weights, config, pretrained):
        import keras

        return getattr(keras.applications, constructor)(
            input_shape=shape,
            include_top=False,
            weights=weights,
            pooling="avg",
            include_preprocessing=pretrained,
        )

    return build


def _resnet50(shape, weights, config, pretrained):
    import keras

    return keras.applications.ResNet50(
        input_shape=shape, include_top=False, weights=weights, pooling="avg"
    )


def _tiny_cnn(shape, weights, config, pretrained):
    """Three conv blocks: for smoke tests and CPU runs where a real backbone is too slow."""
    import keras

    inputs = keras.Input(shape)
    x = inputs
    for filters in (16, 32, 64):
        x = keras.layers.Conv2D(filters, 3, strides=2, padding="same", use_bias=False)(x)
        x = keras.layers.BatchNormalization()(x)
        x = keras.layers.ReLU()(x)
    x = keras.layers.GlobalAveragePooling2D()(x)
    model = keras.Model(inputs, x, name="tiny_cnn")
    if weights:
        model.load_weights(weights)
    return model


BACKBONES: dict[str, Backbone] = {
    b.name: b
    for b in (
        Backbone(
            MOBILENET_V3_SMALL,
            _mobilenet_v3_small,
            native_size=224,
            pixels=IN_MODEL,
            family="mobilenet_v3",
            imagenet=True,
            options=frozenset({"width_multiplier"}),
        ),
        Backbone(
            EFFICIENTNET_V2_B0,
            _efficientnet_v2("EfficientNetV2B0"),
            native_size=224,
            pixels=IN_MODEL,
            family="efficientnet_v2",
            imagenet=True,
        ),
        Backbone(
            EFFICIENTNET_V2_S,
            _efficientnet_v2("EfficientNetV2S"),
            native_size=384,
            pixels=IN_MODEL,
            family="efficientnet_v2",
            imagenet=True,
        ),
        Backbone(
            RESNET50, _resnet50, native_size=224, pixels=CAFFE, family="resnet50", imagenet=True
        ),
        # Its weights come from this project's own runs, trained on standardized pixels.
        Backbone(
            TINY_CNN, _tiny_cnn, native_size=128, pixels=STANDARDIZED, family=None, imagenet=False
        ),
    )
}

# What `backbone: auto` becomes: with weights, a small ImageNet backbone; without, the
# one that learns from scratch on a CPU in minutes.
PRETRAINED_BACKBONE = MOBILENET_V3_SMALL
SCRATCH_BACKBONE = TINY_CNN


def option_defaults_hold(backbone: Backbone, config: Any) -> list[str]:
    """The per-backbone options set away from their defaults on a backbone they do not
    change (a silent no-op otherwise)."""
    import dataclasses as dc

    per_backbone = {option for b in BACKBONES.values() for option in b.options}
    defaults = {f.name: f.default for f in dc.fields(config)}
    return sorted(
        name
        for name in per_backbone - backbone.options
        if getattr(config, name) != defaults.get(name)
    )
