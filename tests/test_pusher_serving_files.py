"""What a push carries for serving: the KServe InferenceService, the model card and a TF
Serving REST request whose input names are the SavedModel's own."""

from __future__ import annotations

import base64
import json
import os

import numpy as np
import pytest
import yaml

from imgpipe.components.common.formats import serving
from imgpipe.components.common.images.model_input import ModelInput
from imgpipe.components.common.runtime import config_loader
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
    # TF Serving on the config file that names the newest whole version, never KServe's
    # `tensorflow` format on the folder (its highest subfolder may be half copied).
    assert "model" not in predictor
    (container,) = predictor["containers"]
    assert container["image"] == sf.SERVING_GPU_IMAGE
    assert container["args"][-1] == "--model_config_file=/mnt/models/kserve-models.config"
    assert container["env"] == [{"name": "STORAGE_URI", "value": "gs://b/serving/flowers"}]
    assert container["resources"] == {
        "requests": {"cpu": "1", "memory": "2Gi"},
        "limits": {"memory": "4Gi", "cpu": "4", "nvidia.com/gpu": "1"},
    }


@pytest.mark.unit
@pytest.mark.parametrize("custom_config", [None, "null", "{}", {}])
def test_a_pusher_without_a_serving_config_uses_the_defaults(custom_config):
    from imgpipe.components.pusher import executor as pusher

    properties = {} if custom_config is None else {"custom_config": custom_config}
    assert pusher.serving_config(properties) == sf.ServingConfig()


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
        TrainerConfig(backbone="tiny_cnn", image_size=SIZE),
        len(th.CLASSES),
        ModelInput(MEAN, STD, SIZE),
    )
    path = str(tmp_path / "model")
    export.export_serving_model(model, path, th.CLASSES, ModelInput(MEAN, STD, SIZE))
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


@pytest.mark.component
def test_each_push_carries_its_serving_files_under_its_manifest(tmp_path):
    """A real push: the InferenceService names the serving folder and the configured
    resources, the model card the blessing and the Evaluator's scores, the REST request
    the SavedModel's own input, and the push's manifest covers all four."""
    import tensorflow as tf
    from google.protobuf import json_format
    from tfx.proto import pusher_pb2
    from tfx.types import standard_artifacts

    from imgpipe.components.common.formats import layout, manifest, served_models
    from imgpipe.components.pusher import executor as pusher
    from imgpipe.components.trainer import export
    from imgpipe.components.trainer import model as model_lib
    from imgpipe.components.trainer.config import TrainerConfig

    model = standard_artifacts.Model()
    model.uri = str(tmp_path / "model")
    keras_model = model_lib.build_model(
        TrainerConfig(backbone="tiny_cnn", image_size=SIZE),
        len(th.CLASSES),
        ModelInput(MEAN, STD, SIZE),
    )
    export.export_serving_model(
        keras_model,
        os.path.join(model.uri, "Format-Serving"),
        th.CLASSES,
        ModelInput(MEAN, STD, SIZE),
    )
    blessing = standard_artifacts.ModelBlessing()
    blessing.uri = str(tmp_path / "blessing")
    os.makedirs(blessing.uri)
    blessing.set_int_custom_property("blessed", 1)
    blessing.set_string_custom_property("reason", "every check passed")
    with open(os.path.join(blessing.uri, layout.EVALUATION_FILE), "w") as f:
        json.dump({"candidate": {"accuracy": 0.875}}, f)
    pushed = standard_artifacts.PushedModel()
    pushed.uri = str(tmp_path / "pushed")
    serving = str(tmp_path / "flowers")
    destination = pusher_pb2.PushDestination(
        filesystem=pusher_pb2.PushDestination.Filesystem(base_directory=serving)
    )
    pusher.Executor().Do(
        {"model": [model], "model_blessing": [blessing]},
        {"pushed_model": [pushed]},
        {
            "push_destination": json_format.MessageToJson(destination),
            "custom_config": json.dumps({"serving": {"gpus": 1, "memory_limit": "8Gi"}}),
        },
    )

    push = served_models.find(serving, checksums=True).model
    extra = os.path.join(push.path, served_models.ASSETS_EXTRA_DIR)
    names = [
        sf.INFERENCE_SERVICE_FILE,
        sf.MODEL_CARD_JSON_FILE,
        sf.MODEL_CARD_MARKDOWN_FILE,
        sf.REST_REQUEST_FILE,
    ]
    listed = manifest.read(push.path).files
    for name in names:
        assert f"{served_models.ASSETS_EXTRA_DIR}/{name}" in listed
    service = yaml.safe_load(open(os.path.join(extra, sf.INFERENCE_SERVICE_FILE)))
    assert service["metadata"]["name"] == "flowers"
    assert service["metadata"]["annotations"]["imgpipe/model-version"] == str(push.version)
    (container,) = service["spec"]["predictor"]["containers"]
    assert container["env"] == [{"name": "STORAGE_URI", "value": serving}]
    assert container["resources"]["limits"] == {"memory": "8Gi", "nvidia.com/gpu": "1"}
    card = json.load(open(os.path.join(extra, sf.MODEL_CARD_JSON_FILE)))
    assert card["model"] == {
        "name": "flowers",
        "version": push.version,
        "path": push.path,
        "classes": list(th.CLASSES),
    }
    assert card["blessing"]["reason"] == "every check passed"
    assert card["evaluation"] == {"candidate": {"accuracy": 0.875}}
    request = json.load(open(os.path.join(extra, sf.REST_REQUEST_FILE)))
    signature = tf.saved_model.load(push.path).signatures[request["signature_name"]]
    assert set(request["instances"][0]) == set(signature.structured_input_signature[1])
