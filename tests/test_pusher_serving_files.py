"""What a push carries for serving: the KServe InferenceService, the model card and a TF
Serving REST request whose input names are the SavedModel's own."""

from __future__ import annotations

import base64
import json
import os

import numpy as np
import pytest
import yaml

from imgpipe.components.common import config_loader, serving
from imgpipe.components.pusher import serving_files as sf
from tests import trainer_helpers as th

SIZE = 32
MEAN, STD = (110.0, 80.0, 110.0), (70.0, 60.0, 70.0)


@pytest.mark.unit
def test_the_inference_service_serves_the_folder_with_the_configured_resources():
    config = config_loader.from_dict(
        sf.ServingConfig, {"namespace": "models", "gpus": 1, "cpu_limit": "4", "max_replicas": 3}
    )
    service = sf.inference_service(config, "Flowers_v2", "gs://b/serving/flowers", 1795600000)
    assert yaml.safe_load(yaml.safe_dump(service)) == service
    assert service["apiVersion"] == "serving.kserve.io/v1beta1"
    assert service["kind"] == "InferenceService"
    assert service["metadata"] == {
        "name": "flowers-v2",
        "namespace": "models",
        "annotations": {"imgpipe/model-version": "1795600000"},
    }
    predictor = service["spec"]["predictor"]
    assert (predictor["minReplicas"], predictor["maxReplicas"]) == (1, 3)
    assert predictor["model"] == {
        "modelFormat": {"name": "tensorflow"},
        "storageUri": "gs://b/serving/flowers",
        "resources": {
            "requests": {"cpu": "1", "memory": "2Gi"},
            "limits": {"memory": "4Gi", "cpu": "4", "nvidia.com/gpu": "1"},
        },
    }


@pytest.mark.unit
@pytest.mark.parametrize(
    "values, match",
    [
        ({"name": "Not_A_Label"}, "name must be a DNS label"),
        ({"gpus": -1}, "gpus must be 0 or more"),
        ({"min_replicas": 3, "max_replicas": 2}, "min_replicas must be"),
    ],
)
def test_serving_config_refuses_what_kubernetes_would(values, match):
    with pytest.raises(ValueError, match=match):
        config_loader.from_dict(sf.ServingConfig, values)


@pytest.mark.unit
def test_the_model_card_holds_every_fact_and_reads_as_markdown():
    facts = sf.ModelCardFacts(
        name="flowers",
        version=7,
        path="/serving/7",
        labels=("daisy", "rose"),
        spans=(3,),
        blessed=True,
        reason="every check passed",
        champion="/serving/6",
        training={"backbone": "tiny_cnn", "epochs": 5},
        statistics={"images": 120},
        evaluation={"candidate": {"accuracy": 0.93}, "champion": {"accuracy": 0.9}},
    )
    card = sf.model_card(facts)
    assert json.loads(sf.to_json_text(card)) == card
    text = sf.model_card_markdown(card)
    for expected in (
        "# flowers, version 7",
        "**Classes (2):** daisy, rose",
        "**Data spans:** 3",
        "**Blessed:** yes: every check passed",
        "| candidate.accuracy | 0.9300 |",
        "| champion.accuracy | 0.9000 |",
        "- backbone: tiny_cnn",
        "- images: 120",
    ):
        assert expected in text


@pytest.mark.component
def test_the_rest_request_names_the_signatures_inputs_and_predicts(tmp_path):
    import tensorflow as tf

    from imgpipe.components.trainer import export
    from imgpipe.components.trainer import model as model_lib
    from imgpipe.components.trainer.config import TrainerConfig

    model = model_lib.build_model(
        TrainerConfig(backbone="tiny_cnn", image_size=SIZE), len(th.CLASSES), (MEAN, STD)
    )
    path = str(tmp_path / "model")
    export.export_serving_model(model, path, th.CLASSES, SIZE, 0.875)
    image = tf.io.encode_jpeg(th.class_image(th.CLASSES[0], 1, SIZE)).numpy()
    request = sf.rest_request(image)

    loaded = tf.saved_model.load(path)
    signature = loaded.signatures[request["signature_name"]]
    (instance,) = request["instances"]
    assert set(instance) == set(signature.structured_input_signature[1])
    images = tf.constant([base64.b64decode(instance[serving.IMAGES_INPUT]["b64"])])
    out = signature(**{serving.IMAGES_INPUT: images})
    assert out[serving.PROBABILITIES].shape == (1, len(th.CLASSES))
    np.testing.assert_allclose(np.sum(out[serving.PROBABILITIES].numpy()), 1.0, rtol=1e-5)
    assert os.path.exists(os.path.join(path, "saved_model.pb"))
