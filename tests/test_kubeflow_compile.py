"""The compiled KFP v2 package: static checks, the golden file, the kfp client calls
(against a fake API server on 127.0.0.1) and the entrypoint's fixes for OSS KFP v2.

Regenerate the golden file with IMGPIPE_UPDATE_GOLDEN=1.
"""

from __future__ import annotations

import json
import os
import re
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer

import pytest
import yaml
from google.protobuf import json_format
from kfp.pipeline_spec import pipeline_spec_pb2

from imgpipe.components.common.runtime import config_loader
from imgpipe.pipelines import cli, tfx_patches
from imgpipe.pipelines import component_ids as ids
from imgpipe.pipelines import config as cfg
from imgpipe.pipelines.beam_args import DEFAULT_LOCAL_BEAM_ARGS
from imgpipe.pipelines.cli import kfp as cli_kfp
from imgpipe.pipelines.container import entrypoint
from imgpipe.pipelines.images import RUNTIME_GID, RUNTIME_UID
from imgpipe.pipelines.kfp_contract import ARTIFACT_IO_ENV, MODE_AUTO, MODE_LOCAL, RUN_FOLDERS_ENV
from imgpipe.pipelines.kubeflow import compiler
from imgpipe.pipelines.kubeflow.config import DEFAULT_IMAGE_KEY
from imgpipe.pipelines.kubeflow.quantities import cpu_cores, memory_gb

pytestmark = pytest.mark.component

GOLDEN = os.path.join(os.path.dirname(os.path.abspath(__file__)), "golden", "pipeline.yaml")
GPU_IMAGE = "registry.example/imgpipe-gpu:1.2.3"

TEST_SETTINGS = {
    "pipeline_name": "golden-pipeline",
    "data_root": "gs://imgpipe-test/images/span-{SPAN}",
    "pipeline_root": "gs://imgpipe-test/root",
    "serving_dir": "/mnt/imgpipe/serving",
    "trainer": {"image_size": 128, "epochs": 3, "batch_size": 16, "num_gpus": 2},
    "evaluator": {"accuracy_threshold": 0.5},
    "kubeflow": {
        "pvc_name": "imgpipe-data",
        "mount_path": "/mnt/imgpipe",
        "resources": {"Trainer": {"cpu_request": "8", "memory_request": "30Gi"}},
        "gpu": {
            "node_selector": {"cloud.google.com/gke-accelerator": "nvidia-l4"},
            "tolerations": [
                {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
            ],
        },
        "images": {"Trainer": GPU_IMAGE},
    },
}


def strip_versions(text: str) -> str:
    """Drops what changes with the stack's or the project's version, not with the pipeline."""
    text = re.sub(r"tfx-\d+\.\d+\.\d+[\w.\-]*", "tfx-<version>", text)
    return re.sub(r"(image: \S+?):[\w.\-]+\n", r"\1:<tag>\n", text)


@pytest.fixture(scope="module")
def compiled(tmp_path_factory):
    config = cfg.from_dict(TEST_SETTINGS)
    path = str(tmp_path_factory.mktemp("kfp") / "pipeline.yaml")
    assert cli.main(["kfp", "compile", "--config", write_config(tmp_path_factory), "-o", path]) == 0
    with open(path) as f:
        text = f.read()
    spec, platform = [d for d in yaml.safe_load_all(text) if d]
    return config, path, text, spec, platform


def write_config(tmp_path_factory) -> str:
    path = tmp_path_factory.mktemp("config") / "pipeline-config.yaml"
    path.write_text(yaml.safe_dump(TEST_SETTINGS))
    return str(path)


def executor(spec: dict, task: str) -> dict:
    return spec["deploymentSpec"]["executors"][compiler.executor_labels(spec)[task]]


def test_matches_the_golden_file(compiled):
    _, _, text, _, _ = compiled
    text = strip_versions(text)
    if os.environ.get("IMGPIPE_UPDATE_GOLDEN"):
        os.makedirs(os.path.dirname(GOLDEN), exist_ok=True)
        with open(GOLDEN, "w") as f:
            f.write(text)
    with open(GOLDEN) as f:
        assert text == f.read(), "compiled YAML changed; IMGPIPE_UPDATE_GOLDEN=1 regenerates"


def test_parses_into_kfps_protos_and_loads_as_a_component(compiled):
    from kfp import components
    from kfp.kubernetes import kubernetes_executor_config_pb2 as k8s_pb2

    _, path, _, spec, platform = compiled
    proto = json_format.ParseDict(spec, pipeline_spec_pb2.PipelineSpec())
    assert proto.schema_version == "2.1.0"
    assert set(proto.root.dag.tasks) == set(ids.COMPONENT_IDS)
    platform_proto = json_format.ParseDict(platform, pipeline_spec_pb2.PlatformSpec())
    executors = platform_proto.platforms["kubernetes"].deployment_spec.executors
    assert set(executors) == set(compiler.executor_labels(spec).values())
    for config in executors.values():
        k8s = json_format.ParseDict(
            json_format.MessageToDict(config), k8s_pb2.KubernetesExecutorConfig()
        )
        # A step that hangs is stopped at the run's deadline (run_deadline_hours, 24).
        assert k8s.active_deadline_seconds == 24 * 3600
    component = components.load_component_from_file(path)
    assert component.pipeline_spec.pipeline_info.name == "golden-pipeline"
    assert component.platform_spec.platforms["kubernetes"] == platform_proto.platforms["kubernetes"]


def test_the_trainer_gets_gpus_node_selector_tolerations_and_its_image(compiled):
    _, _, _, spec, platform = compiled
    trainer = executor(spec, ids.TRAINER)["container"]
    assert trainer["image"] == GPU_IMAGE
    accelerator = trainer["resources"]["accelerator"]
    assert accelerator["resourceType"] == accelerator["type"] == "nvidia.com/gpu"
    assert accelerator["resourceCount"] == "2"
    assert trainer["resources"]["resourceCpuRequest"] == "8"
    label = compiler.executor_labels(spec)[ids.TRAINER]
    k8s = platform["platforms"]["kubernetes"]["deploymentSpec"]["executors"][label]
    assert k8s["nodeSelector"] == {"labels": {"cloud.google.com/gke-accelerator": "nvidia-l4"}}
    assert k8s["tolerations"] == [
        {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
    ]
    assert k8s["pvcMount"][0]["mountPath"] == "/mnt/imgpipe"


def test_data_components_get_requests_no_gpu_and_the_runtime_image(compiled):
    config, _, _, spec, platform = compiled
    executors = platform["platforms"]["kubernetes"]["deploymentSpec"]["executors"]
    for task in (ids.EXAMPLE_GEN, ids.STATISTICS_GEN, ids.IMAGE_STATISTICS):
        container = executor(spec, task)["container"]
        assert container["image"] == config.kubeflow.image_for(DEFAULT_IMAGE_KEY)
        assert container["resources"]["resourceCpuRequest"] == "2"
        assert container["resources"]["resourceMemoryRequest"] == "4Gi"
        assert "accelerator" not in container["resources"]
        label = compiler.executor_labels(spec)[task]
        assert "nodeSelector" not in executors[label] and "tolerations" not in executors[label]


def test_every_step_records_its_run_folder_and_the_pushers_step_collects(compiled):
    """Retention on Kubeflow (pipelines/retention_runs.py), from the config's settings;
    none with retention off."""
    config, _, _, spec, _ = compiled
    for task in ids.COMPONENT_IDS:
        env = {e["name"]: e.get("value") for e in executor(spec, task)["container"]["env"]}
        settings = json.loads(env[RUN_FOLDERS_ENV])
        assert settings["pipeline_root"] == config.pipeline_root
        if task == ids.PUSHER:
            assert settings["collect"] == {
                "serving_dir": config.serving_dir,
                "trainer_spans": config.trainer.spans,
                "retention": config_loader.to_dict(config.retention),
            }
        else:
            assert "collect" not in settings, task
    off = cfg.from_dict({**TEST_SETTINGS, "retention": {"enabled": False}})
    assert compiler.run_folders_env(off, collects=True) == {}


def test_every_step_runs_the_project_entrypoint_with_tfxs_arguments(compiled):
    _, _, _, spec, _ = compiled
    for task in ids.COMPONENT_IDS:
        container = executor(spec, task)["container"]
        assert container["command"] == ["python", "-m", "imgpipe.pipelines.container.entrypoint"]
        args = container["args"]
        assert args[:4][0] == "--executor_class_path" and args[3] == "{{$}}"
        assert args[4] == "--json_serialized_inputs_spec_args"
        assert {"name": ARTIFACT_IO_ENV, "value": "auto"} in container["env"]
    for task in (ids.EXAMPLE_GEN, ids.STATISTICS_GEN, ids.IMAGE_STATISTICS):
        args = executor(spec, task)["container"]["args"]
        assert args[-len(DEFAULT_LOCAL_BEAM_ARGS) :] == list(DEFAULT_LOCAL_BEAM_ARGS), task
    tasks = spec["root"]["dag"]["tasks"]
    assert tasks[ids.EXAMPLE_GEN]["cachingOptions"] == {"enableCache": False}
    assert tasks[ids.TRAINER]["cachingOptions"] == {"enableCache": True}


def test_every_step_runs_as_the_images_non_root_user(compiled):
    from kfp.kubernetes import kubernetes_executor_config_pb2 as k8s_pb2

    _, _, _, spec, platform = compiled
    executors = platform["platforms"]["kubernetes"]["deploymentSpec"]["executors"]
    assert set(executors) == set(compiler.executor_labels(spec).values())
    for entry in executors.values():
        context = json_format.ParseDict(entry, k8s_pb2.KubernetesExecutorConfig()).security_context
        assert context.run_as_non_root is True
        assert (context.run_as_user, context.run_as_group) == (RUNTIME_UID, RUNTIME_GID)


def test_no_part_of_a_kfp_2_16_package_can_set_the_steps_grace_period(compiled):
    """The grace period between SIGTERM and SIGKILL is the cluster's to give the steps:
    no message a package is made of has a field for it. This fails when one gains it,
    so that the compiler then writes step_pod.TERMINATION_GRACE_PERIOD_S; until then the
    docs give the cluster's admin that value."""
    from kfp.kubernetes import kubernetes_executor_config_pb2 as k8s_pb2

    from imgpipe.components.trainer.several_workers import step_pod

    def field_names(message, seen: set[str]):
        if message.full_name in seen:
            return
        seen.add(message.full_name)
        for field in message.fields:
            yield f"{message.full_name}.{field.name}"
            if field.message_type is not None:
                yield from field_names(field.message_type, seen)

    roots = (
        pipeline_spec_pb2.PipelineSpec,
        pipeline_spec_pb2.PipelineDeploymentConfig,
        pipeline_spec_pb2.PlatformSpec,
        k8s_pb2.KubernetesExecutorConfig,
    )
    seen: set[str] = set()
    names = [name for root in roots for name in field_names(root.DESCRIPTOR, seen)]
    assert "kfp_kubernetes.KubernetesExecutorConfig.active_deadline_seconds" in names
    stop_fields = [n for n in names if "grace" in n.lower() or "terminat" in n.lower()]
    assert stop_fields == [], (
        f"KFP's messages now have {stop_fields}: make the compiler write "
        "TERMINATION_GRACE_PERIOD_S there, and update docs/kubeflow.md"
    )
    _, _, text, _, _ = compiled
    assert "grace" not in text.lower()
    with open(os.path.join(os.path.dirname(GOLDEN), "..", "..", "docs", "kubeflow.md")) as f:
        given = re.findall(r"terminationGracePeriodSeconds\W+(\d+)", f.read())
    assert given and set(given) == {str(step_pod.TERMINATION_GRACE_PERIOD_S)}


def test_images_given_by_digest_reach_their_steps():
    default = "registry.example/imgpipe@sha256:" + "1" * 64
    trainer = "registry.example/imgpipe-gpu@sha256:" + "2" * 64
    kubeflow = {**TEST_SETTINGS["kubeflow"], "images": {"default": default, "Trainer": trainer}}
    spec, _ = compiler.compile_pipeline(cfg.from_dict({**TEST_SETTINGS, "kubeflow": kubeflow}))
    for task in ids.COMPONENT_IDS:
        image = executor(spec, task)["container"]["image"]
        assert image == (trainer if task == ids.TRAINER else default), task


def test_beam_args_without_a_runner_keep_beam_in_process():
    config = cfg.from_dict({**TEST_SETTINGS, "beam_args": ["--direct_num_workers=3"]})
    spec, _ = compiler.compile_pipeline(config)
    args = executor(spec, ids.EXAMPLE_GEN)["container"]["args"]
    assert args[-len(DEFAULT_LOCAL_BEAM_ARGS) - 1 :] == [
        *DEFAULT_LOCAL_BEAM_ARGS,
        "--direct_num_workers=3",
    ]


def test_beam_args_for_flink_reach_every_beam_component():
    flink = ["--runner=FlinkRunner", "--flink_master=flink:8081"]
    config = cfg.from_dict({**TEST_SETTINGS, "beam_args": flink})
    spec, _ = compiler.compile_pipeline(config)
    for task in (ids.EXAMPLE_GEN, ids.STATISTICS_GEN, ids.IMAGE_STATISTICS, ids.EVALUATOR):
        args = executor(spec, task)["container"]["args"]
        if task == ids.EVALUATOR and not any(a.startswith("--runner") for a in args):
            continue  # the evaluator may be a plain (non-Beam) component
        assert args[-2:] == flink, task


def test_resource_quantities_convert_as_kfp_does():
    assert cpu_cores("500m") == 0.5
    assert memory_gb("8G") == 8.0
    assert memory_gb("2Gi") == pytest.approx(2.147483648)
    with pytest.raises(ValueError, match="8GB"):
        memory_gb("8GB")


def test_compile_refuses_json_output(tmp_path):
    with pytest.raises(ValueError, match="YAML"):
        compiler.compile_to_file(cfg.from_dict(TEST_SETTINGS), str(tmp_path / "p.json"))


# ---- submit and schedule through kfp.Client ------------------------------------------


class FakeKfpApi(BaseHTTPRequestHandler):
    """Answers the v2beta1 calls kfp.Client makes, and records them."""

    requests: list[tuple[str, str, dict]] = []

    def _reply(self, body: dict) -> None:
        data = json.dumps(body).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):  # noqa: N802
        self.requests.append(("GET", self.path, {}))
        if "healthz" in self.path:
            return self._reply({"multi_user": False})
        return self._reply({"experiments": [], "total_size": 0})

    def do_POST(self):  # noqa: N802
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])) or b"{}")
        self.requests.append(("POST", self.path, body))
        replies = {
            "experiments": {"experiment_id": "exp-1"},
            "runs": {"run_id": "run-1"},
            "recurringruns": {"recurring_run_id": "rr-1"},
        }
        return self._reply(replies[self.path.rsplit("/", 1)[-1]])

    def log_message(self, *args):
        pass


@pytest.fixture
def kfp_api():
    FakeKfpApi.requests = []
    server = HTTPServer(("127.0.0.1", 0), FakeKfpApi)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_port}", FakeKfpApi.requests
    server.shutdown()


def _posted(requests, endpoint: str) -> dict:
    (body,) = [
        b for method, path, b in requests if method == "POST" and path.endswith("/" + endpoint)
    ]
    return body


def test_submit_posts_the_package_through_the_kfp_client(compiled, kfp_api, capsys):
    _, path, _, _, _ = compiled
    host, requests = kfp_api
    assert (
        cli.main(
            [
                "kfp",
                "submit",
                "--host",
                host,
                "--experiment",
                "nightly",
                "--package",
                path,
                "--config",
                write_config_file(path),
            ]
        )
        == 0
    )
    assert "submitted run run-1" in capsys.readouterr().out
    assert _posted(requests, "experiments")["display_name"] == "nightly"
    run = _posted(requests, "runs")
    assert run["experiment_id"] == "exp-1"
    assert run["service_account"] == "imgpipe-runner"
    assert run["runtime_config"]["pipeline_root"] == "gs://imgpipe-test/root"
    sent = json.dumps(run["pipeline_spec"])
    # The platform spec goes too.
    assert "imgpipe.pipelines.container.entrypoint" in sent and "nvidia-l4" in sent


def test_schedule_creates_a_recurring_run_without_catch_up(compiled, kfp_api, capsys):
    _, path, _, _, _ = compiled
    host, requests = kfp_api
    assert (
        cli.main(
            [
                "kfp",
                "schedule",
                "--host",
                host,
                "--experiment",
                "nightly",
                "--cron",
                "0 0 3 * * *",
                "--package",
                path,
                "--config",
                write_config_file(path),
            ]
        )
        == 0
    )
    assert "max concurrency 1, no catch-up" in capsys.readouterr().out
    job = _posted(requests, "recurringruns")
    assert job["trigger"] == {"cron_schedule": {"cron": "0 0 3 * * *"}}
    assert int(job["max_concurrency"]) == 1 and job["no_catchup"] is True
    assert job["display_name"] == "golden-pipeline-schedule"
    assert job["mode"] == "ENABLE"


def write_config_file(package_path: str) -> str:
    path = os.path.join(os.path.dirname(package_path), "submit-config.yaml")
    with open(path, "w") as f:
        yaml.safe_dump(TEST_SETTINGS, f)
    return path


def test_params_are_checked_against_the_package():
    spec = {
        "root": {
            "inputDefinitions": {
                "parameters": {
                    "epochs": {"parameterType": "NUMBER_INTEGER"},
                    "tag": {"parameterType": "STRING"},
                }
            }
        }
    }
    assert cli_kfp.parse_params(["epochs=3", "tag=a=b"], spec) == {"epochs": 3, "tag": "a=b"}
    with pytest.raises(ValueError, match="no parameter 'lr'"):
        cli_kfp.parse_params(["lr=0.1"], spec)
    with pytest.raises(ValueError, match="not a NUMBER_INTEGER"):
        cli_kfp.parse_params(["epochs=three"], spec)
    with pytest.raises(ValueError, match="six fields"):
        cli_kfp.validate_cron("0 3 * * *")


# ---- the entrypoint's fixes ------------------------------------------------------------


def _executor_input(artifact_type: dict, metadata: dict | None = None):
    return json_format.ParseDict(
        {
            "inputs": {
                "artifacts": {
                    "examples": {
                        "artifacts": [
                            {
                                "name": "a1",
                                "uri": "minio://mlpipeline/v2/artifacts/run/gen/examples",
                                "type": artifact_type,
                                "metadata": metadata or {},
                            }
                        ]
                    }
                }
            },
            "outputs": {
                "artifacts": {
                    "statistics": {
                        "artifacts": [
                            {
                                "uri": "gs://bucket/run/stats/statistics",
                                "type": {"instanceSchema": "title: tfx.ExampleStatistics\n"},
                            }
                        ]
                    }
                },
                "outputFile": "/tmp/kfp_outputs/output_metadata.json",
            },
        },
        pipeline_spec_pb2.ExecutorInput(),
    )


INPUTS_SPEC = json_format.ParseDict(
    {
        "artifacts": {
            "examples": {"artifactType": {"instanceSchema": "title: tfx.Examples\ntype: object\n"}}
        }
    },
    pipeline_spec_pb2.ComponentInputsSpec(),
)


@pytest.mark.parametrize(
    "artifact_type",
    [
        {"schemaTitle": "system.Artifact"},
        {"schemaTitle": "system.Dataset"},
        {"instanceSchema": ""},
        {},
    ],
    ids=["system.Artifact", "system.Dataset", "null-schema", "untyped"],
)
def test_inputs_get_their_declared_tfx_type_back(artifact_type):
    from tfx.orchestration.kubeflow.v2.container import kubeflow_v2_entrypoint_utils as utils

    tfx_patches.patch_tfx_entrypoint()
    executor_input = _executor_input(artifact_type)
    assert entrypoint.restore_input_types(executor_input, INPUTS_SPEC) == ["examples"]
    parsed = utils.parse_raw_artifact_dict(executor_input.inputs.artifacts)
    assert type(parsed["examples"][0]).__name__ == "Examples"


def test_without_a_spec_metadata_keys_decide_and_unknowns_stay_generic():
    from tfx.orchestration.kubeflow.v2.container import kubeflow_v2_entrypoint_utils as utils

    tfx_patches.patch_tfx_entrypoint()
    executor_input = _executor_input(
        {"schemaTitle": "system.Artifact"}, {"split_names": '["train","eval"]'}
    )
    entrypoint.restore_input_types(executor_input, None)
    assert (
        type(utils.parse_raw_artifact_dict(executor_input.inputs.artifacts)["examples"][0]).__name__
        == "Examples"
    )
    # Null instance_schema (breakage 2) no longer raises TypeError in TFX's own parser.
    untyped = _executor_input({"instanceSchema": ""})
    artifact = utils.parse_raw_artifact_dict(untyped.inputs.artifacts)["examples"][0]
    assert artifact.type_name == "system.Artifact"


def test_artifact_uris_go_through_the_launchers_local_paths(tmp_path):
    executor_input = _executor_input({"schemaTitle": "system.Dataset"})
    remote_of = entrypoint.localize_uris(executor_input, MODE_AUTO)
    # auto: minio:// is not a TensorFlow filesystem, gs:// is.
    assert executor_input.inputs.artifacts["examples"].artifacts[0].uri == (
        "/minio/mlpipeline/v2/artifacts/run/gen/examples"
    )
    assert executor_input.outputs.artifacts["statistics"].artifacts[0].uri == (
        "gs://bucket/run/stats/statistics"
    )
    local = _executor_input({})
    remote_of = entrypoint.localize_uris(local, MODE_LOCAL)
    assert remote_of["/gcs/bucket/run/stats/statistics"] == "gs://bucket/run/stats/statistics"
    output_file = tmp_path / "output_metadata.json"
    output_file.write_text(
        json.dumps(
            {
                "artifacts": {
                    "statistics": {"artifacts": [{"uri": "/gcs/bucket/run/stats/statistics"}]}
                }
            }
        )
    )
    entrypoint.restore_output_uris(str(output_file), remote_of)
    assert (
        json.loads(output_file.read_text())["artifacts"]["statistics"]["artifacts"][0]["uri"]
        == "gs://bucket/run/stats/statistics"
    )
    with pytest.raises(ValueError, match=r"must be one of \[.auto., .direct., .local.\]"):
        entrypoint.localize_uris(_executor_input({}), "sometimes")


class _Blob:
    def __init__(self, name: str, size: int, deleted: list):
        self.name, self.size, self._deleted = name, size, deleted

    def delete(self):
        self._deleted.append(self.name)


def test_zero_byte_directory_markers_are_deleted_under_gcs_outputs():
    deleted: list[str] = []
    blobs = [
        _Blob("run/model/", 0, deleted),
        _Blob("run/model/Format-Serving/", 0, deleted),
        _Blob("run/model/Format-Serving/saved_model.pb", 1234, deleted),
        _Blob("run/model/empty.txt", 0, deleted),
    ]
    listed = []

    class Client:
        def bucket(self, name):
            assert name == "bucket"
            return type("B", (), {"list_blobs": lambda _, prefix: listed.append(prefix) or blobs})()

    n = entrypoint.delete_gcs_directory_markers(
        ["gs://bucket/run/model", "/local/path"], make_client=Client
    )
    assert n == 2 and deleted == ["run/model/", "run/model/Format-Serving/"]
    assert listed == ["run/model/"]


def test_the_kubeflow_v2_runner_is_exported_for_user_code():
    from tfx.v1.orchestration import experimental

    tfx_patches.export_kubeflow_v2_runner()
    assert experimental.KubeflowV2DagRunner.__module__.endswith("kubeflow_v2_dag_runner")


def test_the_package_declares_runtime_parameters_with_the_config_defaults(compiled):
    config, _, _, spec, _ = compiled
    declared = spec["root"]["inputDefinitions"]["parameters"]
    assert declared == {
        "data_root": {
            "defaultValue": config.data_root,
            "isOptional": True,
            "parameterType": "STRING",
        },
        "epochs": {
            "defaultValue": config.trainer.epochs,
            "isOptional": True,
            "parameterType": "NUMBER_INTEGER",
        },
        "tolerance": {
            "defaultValue": config.evaluator.tolerance,
            "isOptional": True,
            "parameterType": "NUMBER_DOUBLE",
        },
        "spans": {
            "defaultValue": config.trainer.spans,
            "isOptional": True,
            "parameterType": "NUMBER_INTEGER",
        },
        # No span's drift (or label audit) is accepted unless a run says which
        # (docs/retraining.md).
        "accept_drift_span": {
            "defaultValue": -1,
            "isOptional": True,
            "parameterType": "NUMBER_INTEGER",
        },
        "accept_label_issues_span": {
            "defaultValue": -1,
            "isOptional": True,
            "parameterType": "NUMBER_INTEGER",
        },
        # What the Trainer launches its workers as on Kubeflow (trainer.workers > 1).
        "launcher": {
            "defaultValue": config.trainer.launcher,
            "isOptional": True,
            "parameterType": "STRING",
        },
    }
    tasks = spec["root"]["dag"]["tasks"]

    def consumer(task: str, name: str) -> dict:
        return tasks[task]["inputs"]["parameters"][name]

    assert consumer(ids.EXAMPLE_GEN, "input_base") == {"componentInputParameter": "data_root"}
    assert consumer(ids.TRAINER, "epochs") == {"componentInputParameter": "epochs"}
    assert consumer(ids.TRAINER, "launcher") == {"componentInputParameter": "launcher"}
    assert consumer(ids.EVALUATOR, "tolerance") == {"componentInputParameter": "tolerance"}
    assert consumer(ids.IMAGE_STATISTICS, "accept_drift_span") == {
        "componentInputParameter": "accept_drift_span"
    }
    assert cli_kfp.parse_params(
        ["data_root=gs://b/new-span", "epochs=7", "tolerance=0.05"], spec
    ) == {"data_root": "gs://b/new-span", "epochs": 7, "tolerance": 0.05}


def test_the_package_outputs_whether_the_run_pushed(compiled):
    _, _, _, spec, _ = compiled
    root = spec["root"]
    declared = root["outputDefinitions"]["artifacts"][compiler.PUSHED_OUTPUT]
    assert declared["artifactType"]["schemaTitle"] == "system.Artifact"
    assert root["dag"]["outputs"]["artifacts"][compiler.PUSHED_OUTPUT] == {
        "artifactSelectors": [{"outputArtifactKey": "pushed_model", "producerSubtask": ids.PUSHER}]
    }


def test_run_local_reads_each_steps_outputs_into_the_run_summary(compiled, tmp_path):
    """`kfp run-local` prints the summary `run local` prints, from each step's
    executor output (kfp.local keeps no metadata store)."""
    from imgpipe.components.common.formats import champion
    from imgpipe.pipelines import run_summary
    from imgpipe.pipelines.kubeflow import local_docker

    config, _, _, spec, _ = compiled
    folders = local_docker.task_folders(spec)
    # Components are named comp-<id>, as the KFP SDK names them, so kfp.local's folders
    # and log lines carry the whole step name.
    assert folders == {name: name for name in ids.COMPONENT_IDS}
    resolved_uri = str(tmp_path / "champion")
    champion.write(resolved_uri, champion.resolve(""))
    written = {
        ids.CHAMPION: {"champion": {"artifacts": [{"uri": resolved_uri, "metadata": {}}]}},
        ids.PUSHER: {
            "pushed_model": {
                "artifacts": [
                    {
                        "uri": str(tmp_path / "pushed"),
                        "metadata": {"pushed": 1, "pushed_destination": "/srv/serving/7"},
                    }
                ]
            }
        },
    }
    for task, artifacts in written.items():
        folder = tmp_path / "run" / folders[task]
        folder.mkdir(parents=True)
        (folder / local_docker.EXECUTOR_OUTPUT_FILE).write_text(
            json.dumps({"artifacts": artifacts})
        )
    result = local_docker.run_result(spec, str(tmp_path / "run"))
    assert result.pushed
    lines = run_summary.summary_lines(result, config)
    assert "model (served)       /srv/serving/7" in lines
    assert any(
        line.startswith("champion             none: no serving_dir is set") for line in lines
    )
    # A run that stopped with the lease still held (a step killed, one not ours failed)
    # gives it back when kfp.local returns.
    from imgpipe.components.common.storage import serving_lock

    serving = str(tmp_path / "serving")
    lease = serving_lock.acquire(serving, "the-run")
    champion.write(resolved_uri, champion.resolve(serving, lease_token=lease.token))
    local_docker.release_lease(spec, str(tmp_path / "run"))
    assert serving_lock.current(serving) is None


def test_a_missing_image_is_named_with_the_build_that_makes_it():
    """The default package runs the Trainer in the CUDA image, which `make image` does not
    build: the error says which build makes it, and how to use the CPU image instead."""
    import docker

    from imgpipe.pipelines import images as image_names
    from imgpipe.pipelines.kubeflow import local_docker

    class Engine:  # an engine that holds no image; the message is what is tested
        class images:  # noqa: N801 - docker's client API
            @staticmethod
            def get(name):
                raise docker.errors.ImageNotFound(name)

    with pytest.raises(local_docker.LocalRunError) as raised:
        local_docker.check_images(Engine(), [image_names.GPU_IMAGE])
    message = str(raised.value)
    assert "`make image-gpu`" in message and image_names.RUNTIME_IMAGE in message
    with pytest.raises(local_docker.LocalRunError, match=r"build it \(`make image`\); or"):
        local_docker.check_images(Engine(), [image_names.RUNTIME_IMAGE])


# A step loads what its executor needs, not every TFX component's and evaluator's libraries
# (issue 35): these steps need no Beam, TFMA, TFDV or TFT before their work starts.
STEPS_WITHOUT_BEAM = (
    "imgpipe.components.champion.executor.Executor",
    "imgpipe.components.pusher.executor.Executor",
    "imgpipe.components.evaluator.executor.Executor",
)
UNUSED_BY_THEM = (
    "apache_beam",
    "tensorflow_model_analysis.api",
    "tensorflow_data_validation",
    "tensorflow_transform",
    "nltk",
)
STEP_LOAD_PROBE = f"""
import json, sys
from imgpipe.pipelines import tfx_patches
tfx_patches.defer_heavy_packages()  # first, as the entrypoint's main does
from imgpipe.pipelines.container import entrypoint
loaded = {{}}
for path in {STEPS_WITHOUT_BEAM!r}:
    entrypoint.load_executor(path)
    loaded[path] = [m for m in {UNUSED_BY_THEM!r} if m in sys.modules]
import tensorflow_model_analysis as tfma
from tensorflow_model_analysis.proto import config_pb2
deferred_protos = tfma.EvalConfig is config_pb2.EvalConfig
import tfx.components  # deferred: its names load the whole package on first use
statistics_gen = tfx.components.StatisticsGen.__name__
tfma_api = "tensorflow_model_analysis.api" in sys.modules
print(json.dumps({{"loaded": loaded, "deferred_protos": deferred_protos,
                   "statistics_gen": statistics_gen, "tfma_api": tfma_api}}))
"""


def test_steps_without_beam_start_without_the_libraries_they_do_not_use():
    import subprocess
    import sys

    result = subprocess.run(
        [sys.executable, "-c", STEP_LOAD_PROBE], capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stderr[-3000:]
    facts = json.loads(result.stdout.strip().splitlines()[-1])
    assert facts["loaded"] == {path: [] for path in STEPS_WITHOUT_BEAM}
    # The deferred packages still give what their __init__ gives, once asked.
    assert facts["deferred_protos"] and facts["statistics_gen"] == "StatisticsGen"
    assert facts["tfma_api"]
