"""The backbone table: every backbone builds offline, its options are checked, and with
loaded weights it sees the pixels its weights expect, as keras.applications'
`preprocess_input` for its family and its own preprocessing layers make them."""

from __future__ import annotations

import dataclasses

import keras
import numpy as np
import pytest

from imgpipe.components.common.formats.serving import PROBABILITIES
from imgpipe.components.common.images.model_input import ModelInput
from imgpipe.components.trainer import backbones
from imgpipe.components.trainer import model as model_lib
from imgpipe.components.trainer.config import TrainerConfig, from_custom_config

SIZE = 32
MEAN, STD = (110.0, 80.0, 110.0), (70.0, 60.0, 70.0)
PRETRAINED = [b.name for b in backbones.BACKBONES.values() if b.pixels != backbones.STANDARDIZED]


def pixels(seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, (2, SIZE, SIZE, 3), dtype=np.uint8)


def features(model: keras.Model) -> keras.Model:
    """The classifier up to its head's input: the backbone's output (dropout is the
    identity at inference)."""
    return keras.Model(model.input, model.get_layer(PROBABILITIES).input)


@pytest.mark.component
@pytest.mark.parametrize("name", sorted(backbones.BACKBONES))
def test_every_backbone_builds_offline_from_scratch_on_standardized_pixels(name):
    model = model_lib.build_model(
        TrainerConfig(backbone=name, image_size=SIZE), 5, ModelInput(MEAN, STD, SIZE)
    )
    out = model(pixels())
    assert out.shape == (2, 5) and out.dtype == "float32"
    np.testing.assert_allclose(np.sum(out, axis=-1), 1.0, rtol=1e-5)
    assert model.layers[1].name == "standardize"


@pytest.mark.component
@pytest.mark.parametrize("name", PRETRAINED)
def test_loaded_weights_see_the_pixels_of_their_family(tmp_path, name):
    backbone = backbones.BACKBONES[name]
    config = TrainerConfig(backbone=name, image_size=SIZE)
    # Weights of the backbone as keras.applications lay out pretrained ones (random here:
    # no hub is reached), saved and given as `weights`, as a user's ImageNet file would be.
    reference = backbone.build((SIZE, SIZE, 3), None, config, True)
    path = str(tmp_path / f"{name}.weights.h5")
    reference.save_weights(path)
    ours = model_lib.build_model(
        dataclasses.replace(config, weights=path), 3, ModelInput(MEAN, STD, SIZE)
    )

    family = getattr(keras.applications, backbone.family)
    images = pixels(1)
    expected = reference(family.preprocess_input(images.astype("float32")))
    np.testing.assert_allclose(features(ours)(images), expected, rtol=1e-4, atol=1e-4)
    # The data's standardization would have given it something else.
    scratch = model_lib.build_model(config, 3, ModelInput(MEAN, STD, SIZE))
    model_lib.backbone_of(scratch).set_weights(model_lib.backbone_of(ours).get_weights())
    if backbone.pixels == backbones.CAFFE:
        assert not np.allclose(features(scratch)(images), expected, atol=1e-2)


@pytest.mark.component
def test_a_warm_start_source_has_the_layout_of_pretrained_weights_without_loading_them(tmp_path):
    config = TrainerConfig(backbone="mobilenet_v3_small", image_size=SIZE, weights="imagenet")
    # No download: load_weights=False lays the model out as imagenet weights would.
    source = model_lib.build_model(config, 3, ModelInput(MEAN, STD, SIZE), load_weights=False)
    reference = backbones.BACKBONES["mobilenet_v3_small"].build((SIZE, SIZE, 3), None, config, True)
    assert [w.shape for w in model_lib.backbone_of(source).weights] == [
        w.shape for w in reference.weights
    ]


@pytest.mark.unit
def test_the_table_decides_what_the_config_accepts():
    assert set(from_custom_config({}).__class__.__dataclass_fields__) >= {
        option for b in backbones.BACKBONES.values() for option in b.options
    }
    for name, backbone in backbones.BACKBONES.items():
        resolved = TrainerConfig(backbone=name).resolved()
        assert resolved.image_size == backbone.native_size
        if not backbone.imagenet:
            with pytest.raises(ValueError, match=f"{name} has none"):
                TrainerConfig(backbone=name, weights="imagenet").validate()
        if "width_multiplier" not in backbone.options:
            with pytest.raises(ValueError, match=f"width_multiplier does not change {name}"):
                TrainerConfig(backbone=name, width_multiplier=0.75).validate()
    TrainerConfig(backbone="mobilenet_v3_small", width_multiplier=0.75).validate()
    with pytest.raises(ValueError, match="normalize_on_host applies to training from scratch"):
        TrainerConfig(weights="imagenet", normalize_on_host=True).validate()
