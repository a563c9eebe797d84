"""What a push carries for serving besides the model: a KServe InferenceService, a model
card, and a TF Serving REST request for its signature.

They are written into the version folder's assets.extra/, which model servers do not
load, so a push is ready for serving on its own:
  inference_service.yaml  KServe v1beta1, modelFormat tensorflow; `kubectl apply -f` it
  model_card.json / .md   the data spans, statistics, evaluation scores, the blessing
  rest_request.json       `curl -d @rest_request.json .../v1/models/NAME:predict`

Pure functions of plain data: the Pusher gathers the facts, these only shape them.
"""

from __future__ import annotations

import base64
import dataclasses
import json
import posixpath
from collections.abc import Mapping, Sequence
from typing import Any

from imgpipe.components.common.formats import model_config, serving

INFERENCE_SERVICE_FILE = "inference_service.yaml"
MODEL_CARD_JSON_FILE = "model_card.json"
MODEL_CARD_MARKDOWN_FILE = "model_card.md"
REST_REQUEST_FILE = "rest_request.json"
MODEL_CARD_VERSION = 1
# The Pusher's custom_config key of the ServingConfig (the pipeline config's `serving:`).
SERVING_CONFIG_KEY = "serving"

# KServe's API and its name for the TensorFlow Serving runtime's model format.
KSERVE_API_VERSION = "serving.kserve.io/v1beta1"
# TensorFlow Serving, pinned: the predictor runs it on that config file, never on the
# folder's highest numbered subfolder, which may be a push still being copied.
SERVING_IMAGE = "tensorflow/serving:2.18.0"
SERVING_GPU_IMAGE = "tensorflow/serving:2.18.0-gpu"
REST_PORT = 8080
GRPC_PORT = 9000


@dataclasses.dataclass(frozen=True)
class ServingConfig:
    """How the pushed model is served: the InferenceService each push carries.

    Attributes:
      name: the InferenceService's name; empty: the pipeline's name.
      namespace: its Kubernetes namespace; empty: the one `kubectl apply` uses.
      cpu_request: the predictor's CPU request.
      memory_request: the predictor's memory request.
      cpu_limit: its CPU limit; empty for none.
      memory_limit: its memory limit.
      gpus: NVIDIA GPUs for the predictor (0: CPU serving).
      min_replicas: the fewest predictor replicas.
      max_replicas: the most predictor replicas (KServe scales between them).
    """

    name: str = ""
    namespace: str = ""
    cpu_request: str = "1"
    memory_request: str = "2Gi"
    cpu_limit: str = ""
    memory_limit: str = "4Gi"
    gpus: int = 0
    min_replicas: int = 1
    max_replicas: int = 1

    def validate(self) -> None:
        """Raises ValueError naming the first bad setting."""
        if self.name and not _is_dns_label(self.name):
            raise ValueError(
                f"name must be a DNS label (lower case letters, digits and '-', at most 63), "
                f"got {self.name!r}"
            )
        if self.gpus < 0:
            raise ValueError(f"gpus must be 0 or more, got {self.gpus}")
        if not 0 <= self.min_replicas <= self.max_replicas or self.max_replicas < 1:
            raise ValueError(
                "min_replicas must be 0 or more and at most max_replicas (at least 1), got "
                f"{self.min_replicas} and {self.max_replicas}"
            )


def _is_dns_label(name: str) -> bool:
    return (
        0 < len(name) <= 63
        and name[0].isalnum()
        and name[-1].isalnum()
        and all(c.islower() or c.isdigit() or c == "-" for c in name)
    )


def service_name(config: ServingConfig, pipeline_name: str) -> str:
    """The InferenceService's name: the configured one, else the pipeline's made a DNS
    label."""
    if config.name:
        return config.name
    name = "".join(c if c.isalnum() else "-" for c in pipeline_name.lower()).strip("-")
    return name[:63].rstrip("-") or "image-classifier"


def inference_service(
    config: ServingConfig, pipeline_name: str, storage_uri: str, version: int
) -> dict[str, Any]:
    """The KServe v1beta1 InferenceService that serves the serving folder `storage_uri`.

    KServe's storage initializer copies the folder to model_config.KSERVE_MODEL_DIR when
    a predictor pod starts, and TensorFlow Serving then loads the version
    model_config.KSERVE_CONFIG_FILE names:
    the newest *whole* push when the copy was made (docs/serving-folder.md). KServe's
    built-in `tensorflow` format would serve the highest numbered subfolder instead, which
    can be a push half copied. The push's version is in the annotations.
    """
    requests = {"cpu": config.cpu_request, "memory": config.memory_request}
    limits = {"memory": config.memory_limit} if config.memory_limit else {}
    if config.cpu_limit:
        limits["cpu"] = config.cpu_limit
    if config.gpus:
        limits["nvidia.com/gpu"] = str(config.gpus)
    metadata: dict[str, Any] = {
        "name": service_name(config, pipeline_name),
        "annotations": {"imgpipe/model-version": str(version)},
    }
    if config.namespace:
        metadata["namespace"] = config.namespace
    return {
        "apiVersion": KSERVE_API_VERSION,
        "kind": "InferenceService",
        "metadata": metadata,
        "spec": {
            "predictor": {
                "minReplicas": config.min_replicas,
                "maxReplicas": config.max_replicas,
                "containers": [
                    {
                        "name": "kserve-container",
                        "image": SERVING_GPU_IMAGE if config.gpus else SERVING_IMAGE,
                        "args": [
                            f"--port={GRPC_PORT}",
                            f"--rest_api_port={REST_PORT}",
                            "--model_config_file="
                            + posixpath.join(
                                model_config.KSERVE_MODEL_DIR, model_config.KSERVE_CONFIG_FILE
                            ),
                        ],
                        # The storage initializer copies it to model_config.KSERVE_MODEL_DIR.
                        "env": [{"name": "STORAGE_URI", "value": storage_uri}],
                        "ports": [{"containerPort": REST_PORT, "protocol": "TCP"}],
                        "resources": {"requests": requests, "limits": limits},
                    }
                ],
            }
        },
    }


def rest_request(image: bytes) -> dict[str, Any]:
    """A TF Serving REST predict request for the serving signature, with one image:
    binary inputs go base64-encoded as {"b64": ...}, under the signature's input name."""
    return {
        "signature_name": serving.SERVING_DEFAULT,
        "instances": [{serving.IMAGES_INPUT: {"b64": base64.b64encode(image).decode()}}],
    }


@dataclasses.dataclass(frozen=True)
class ModelCardFacts:
    """What the model card says, gathered by the Pusher from the push's inputs."""

    name: str
    version: int
    path: str
    labels: Sequence[str]
    spans: Sequence[int]
    blessed: bool
    reason: str
    champion: str
    training: Mapping[str, Any]
    statistics: Mapping[str, Any]
    evaluation: Mapping[str, Any]


def model_card(facts: ModelCardFacts) -> dict[str, Any]:
    """The model card as plain data (model_card.json)."""
    return {
        "version": MODEL_CARD_VERSION,
        "model": {
            "name": facts.name,
            "version": facts.version,
            "path": facts.path,
            "classes": list(facts.labels),
        },
        "data": {"spans": list(facts.spans), "statistics": dict(facts.statistics)},
        "training": dict(facts.training),
        "evaluation": dict(facts.evaluation),
        "blessing": {"blessed": facts.blessed, "reason": facts.reason, "champion": facts.champion},
    }


def model_card_markdown(card: Mapping[str, Any]) -> str:
    """The model card for people (model_card.md), from `model_card`'s data."""
    model, data, blessing = card["model"], card["data"], card["blessing"]
    lines = [
        f"# {model['name']}, version {model['version']}",
        "",
        f"- **Model:** `{model['path']}`",
        f"- **Classes ({len(model['classes'])}):** {', '.join(model['classes'])}",
        f"- **Data spans:** {', '.join(str(s) for s in data['spans']) or 'none recorded'}",
        f"- **Blessed:** {'yes' if blessing['blessed'] else 'no'}: {blessing['reason']}",
        f"- **Champion it was judged against:** {blessing['champion'] or 'none'}",
        "",
        "## Evaluation",
        "",
        _scores(card["evaluation"]),
        "",
        "## Training",
        "",
        _facts(card["training"]),
        "",
        "## Data statistics",
        "",
        _facts(data["statistics"]),
        "",
        f"The whole card, with every score and check, is {MODEL_CARD_JSON_FILE} beside this file.",
    ]
    return "\n".join(lines) + "\n"


def _scores(evaluation: Mapping[str, Any]) -> str:
    """Every number at the top two levels of the evaluation, one row each."""
    rows = [
        (key, value)
        for key, value in _flatten(evaluation, depth=2)
        if isinstance(value, int | float) and not isinstance(value, bool)
    ]
    if not rows:
        return "No scores were recorded."
    table = ["| score | value |", "|---|---|"]
    table += [f"| {key} | {_number(value)} |" for key, value in rows]
    return "\n".join(table)


def _facts(values: Mapping[str, Any]) -> str:
    shown = [(k, v) for k, v in _flatten(values, depth=1) if not isinstance(v, dict | list)]
    if not shown:
        return "None recorded."
    return "\n".join(f"- {key}: {_number(value)}" for key, value in shown)


def _flatten(values: Mapping[str, Any], depth: int, prefix: str = "") -> list[tuple[str, Any]]:
    flat: list[tuple[str, Any]] = []
    for key in sorted(values):
        value = values[key]
        name = f"{prefix}{key}"
        if isinstance(value, Mapping) and depth > 1:
            flat += _flatten(value, depth - 1, f"{name}.")
        else:
            flat.append((name, value))
    return flat


def _number(value: Any) -> str:
    return f"{value:.4f}" if isinstance(value, float) else str(value)


def to_json_text(values: Mapping[str, Any]) -> str:
    """Indented, sorted JSON with a final newline: byte-identical for equal values."""
    return json.dumps(values, indent=2, sort_keys=True) + "\n"
