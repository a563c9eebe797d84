"""One definition of how the steps run and where their credentials come from
(pipelines/kubeflow/security.py), held equal in the compiled package, the k8s/
manifests and `imgpipe kfp run-local`'s Docker options; no compiled package carries a
credential. The container tier (test_kubeflow_docker.py) runs the steps with these
options."""

from __future__ import annotations

import os
import re

import pytest
import yaml
from google.protobuf import json_format

from imgpipe.pipelines import cli, credentials, images
from imgpipe.pipelines import config as cfg
from imgpipe.pipelines.kubeflow import compiler, local_docker, security
from tests.test_k8s_manifests import ALL_DOCUMENTS, PIPELINE_CONFIG, pod_specs
from tests.test_kubeflow_compile import TEST_SETTINGS

# ---- the k8s/ manifests --------------------------------------------------------------


def _project_containers() -> list[tuple[str, dict, dict]]:
    return [
        (name, pod, container)
        for name, pod in pod_specs()
        for container in pod["containers"]
        if container.get("image", "").startswith(f"{images.REGISTRY}/{images.IMAGE_NAME}:")
    ]


@pytest.mark.unit
def test_every_container_of_the_project_image_runs_with_the_defined_settings():
    containers = _project_containers()
    assert {name for name, _, _ in containers} >= {
        "gpu-node-pool.yaml",
        "flink-deployment.yaml:taskManager",
    }
    for name, pod, container in containers:
        effective = {**pod.get("securityContext", {}), **container["securityContext"]}
        expected = {**security.POD_SECURITY_CONTEXT, **security.CONTAINER_SECURITY_CONTEXT}
        assert {k: effective.get(k) for k in expected} == expected, name
        # The one writable path: an emptyDir on /tmp, and the variables that point there.
        volumes = {v["name"]: v for v in pod.get("volumes", [])}
        (tmp,) = [m for m in container["volumeMounts"] if m["mountPath"] == security.WRITABLE_TMP]
        assert volumes[tmp["name"]] == {"name": tmp["name"], "emptyDir": {}}, name
        env = {e["name"]: e.get("value") for e in container.get("env", [])}
        assert {k: env.get(k) for k in security.STEP_ENV} == security.STEP_ENV, name


def _secret_env(container: dict) -> dict[str, tuple[str, str, bool]]:
    return {
        e["name"]: (
            e["valueFrom"]["secretKeyRef"]["name"],
            e["valueFrom"]["secretKeyRef"]["key"],
            e["valueFrom"]["secretKeyRef"].get("optional", False),
        )
        for e in container.get("env", [])
        if "secretKeyRef" in e.get("valueFrom", {})
    }


@pytest.mark.unit
def test_the_flink_workers_read_the_object_store_secret():
    (taskmanager,) = [pod for name, pod in pod_specs() if name.endswith(":taskManager")]
    names = {c["name"] for c in taskmanager["containers"]}
    assert names == {"flink-main-container", "beam-worker-pool"}
    expected = {
        env: (security.OBJECT_STORE_SECRET, key, True) for key, env in security.SECRET_ENV.items()
    }
    for container in taskmanager["containers"]:
        assert _secret_env(container) == expected, container["name"]


@pytest.mark.unit
def test_the_secret_manifest_is_the_one_the_steps_read():
    (secret,) = [d for _, d in ALL_DOCUMENTS if d["kind"] == "Secret"]
    assert secret["metadata"]["name"] == security.OBJECT_STORE_SECRET
    assert set(secret["stringData"]) <= set(security.SECRET_ENV)
    assert all(value == "" for value in secret["stringData"].values())  # never a real key


# ---- the compiled package -----------------------------------------------------------


@pytest.fixture(scope="module")
def compiled(tmp_path_factory) -> tuple[str, dict, dict]:
    config = tmp_path_factory.mktemp("config") / "config.yaml"
    config.write_text(yaml.safe_dump(TEST_SETTINGS))
    path = str(tmp_path_factory.mktemp("kfp") / "pipeline.yaml")
    assert cli.main(["kfp", "compile", "--config", str(config), "-o", path]) == 0
    with open(path) as f:
        text = f.read()
    spec, platform = [d for d in yaml.safe_load_all(text) if d]
    return text, spec, platform


@pytest.mark.component
def test_every_step_gets_the_settings_a_platform_spec_can_carry(compiled):
    from kfp.kubernetes import kubernetes_executor_config_pb2 as k8s_pb2

    _, spec, platform = compiled
    executors = platform["platforms"]["kubernetes"]["deploymentSpec"]["executors"]
    assert set(executors) == set(compiler.executor_labels(spec).values())
    for label, entry in executors.items():
        config = json_format.ParseDict(entry, k8s_pb2.KubernetesExecutorConfig())
        context = config.security_context
        assert {
            "runAsNonRoot": context.run_as_non_root,
            "runAsUser": context.run_as_user,
            "runAsGroup": context.run_as_group,
        } == security.STEP_SECURITY_CONTEXT, label
        (secret,) = config.secret_as_env
        assert secret.secret_name_parameter.runtime_value.constant.string_value == (
            security.OBJECT_STORE_SECRET
        )
        assert secret.optional is True
        assert {m.secret_key: m.env_var for m in secret.key_to_env} == security.SECRET_ENV
        (tmp,) = config.empty_dir_mounts
        assert tmp.mount_path == security.WRITABLE_TMP
        container = spec["deploymentSpec"]["executors"][label]["container"]
        env = {e["name"]: e["value"] for e in container["env"]}
        assert {k: env[k] for k in security.STEP_ENV} == security.STEP_ENV
        # Exactly the settings the package carries, as written, nothing else.
        assert entry["securityContext"] == security.STEP_SECURITY_CONTEXT, label


def _camel(name: str) -> str:
    first, *rest = name.split("_")
    return first + "".join(word.title() for word in rest)


def _sources(source: str) -> set[str]:
    return {key for key, s in security.STEP_SECURITY_SOURCES.items() if s == source}


@pytest.mark.unit
def test_the_package_carries_every_setting_kfp_kubernetes_can_and_names_who_adds_the_rest():
    import inspect

    from kfp import kubernetes
    from kfp.kubernetes import kubernetes_executor_config_pb2 as k8s_pb2
    from kfp.pipeline_spec import pipeline_spec_pb2

    definition = {**security.POD_SECURITY_CONTEXT, **security.CONTAINER_SECURITY_CONTEXT}
    assert set(security.STEP_SECURITY_SOURCES) == set(definition)
    assert set(security.STEP_SECURITY_SOURCES.values()) == {
        security.PACKAGE,
        security.BACKEND,
        security.POLICY,
    }
    carried = {_camel(f.name) for f in k8s_pb2.SecurityContext.DESCRIPTOR.fields}
    assert carried == _sources(security.PACKAGE), (
        f"kfp-kubernetes' SecurityContext now has {sorted(carried)}: make the compiler write "
        "each of the definition's, and update STEP_SECURITY_SOURCES and docs/kubeflow.md"
    )
    parameters = inspect.signature(kubernetes.set_security_context).parameters
    assert {_camel(name) for name in parameters if name != "task"} == carried
    # The PipelineSpec's container is the package's only other part of a step's pod, and
    # it has no security field.
    container = pipeline_spec_pb2.PipelineDeploymentConfig.PipelineContainerSpec
    assert {f.name for f in container.DESCRIPTOR.fields} == {
        "image",
        "command",
        "args",
        "lifecycle",
        "resources",
        "env",
    }
    assert security.STEP_SECURITY_CONTEXT == {k: definition[k] for k in carried}


@pytest.mark.component
def test_the_compiled_yaml_carries_the_package_settings_and_claims_none_of_the_others(
    compiled,
):
    text, _, platform = compiled
    executors = platform["platforms"]["kubernetes"]["deploymentSpec"]["executors"]
    for key in _sources(security.PACKAGE):
        values = {entry["securityContext"][key] for entry in executors.values()}
        assert values == {security.STEP_SECURITY_CONTEXT[key]}, key
    # What the backend or a policy adds appears nowhere in the package: a field the
    # backend does not read would say a step has a setting it has not.
    for key in _sources(security.BACKEND) | _sources(security.POLICY):
        assert key not in text, key


@pytest.mark.unit
def test_the_docs_say_who_puts_each_setting_on_a_step():
    path = os.path.join(os.path.dirname(os.path.dirname(__file__)), "docs", "kubeflow.md")
    with open(path) as f:
        text = f.read()
    section = text.split("### What a KFP 2.16 package can carry", 1)[1].split("\n#", 1)[0]
    rows = [line.split(" | ") for line in section.splitlines() if line.startswith("| ")]
    said = {security.PACKAGE: "the package", security.BACKEND: "backend", security.POLICY: "policy"}
    for key, source in security.STEP_SECURITY_SOURCES.items():
        (row,) = [row for row in rows if f"`{key}" in row[0]]
        assert said[source] in row[1], (key, row)


# Values that look like credentials: AWS key ids, PEM keys, and credential options.
_CREDENTIAL_LOOKING = re.compile(
    r"AKIA[0-9A-Z]{16}|ASIA[0-9A-Z]{16}|-----BEGIN [A-Z ]*PRIVATE KEY|"
    r"--(s3_access_key_id|s3_secret_access_key|s3_session_token|azure_connection_string)|"
    r"(secret|password|token)[\"']?\s*[:=]\s*[\"']?[A-Za-z0-9/+]{8,}",
    re.IGNORECASE,
)


@pytest.mark.component
@pytest.mark.parametrize("source", ["golden", "k8s/pipeline-config.yaml", "defaults"])
def test_no_compiled_package_carries_a_credential(source, compiled, tmp_path):
    if source == "golden":
        text = compiled[0]
    else:
        config = (
            cfg.load(PIPELINE_CONFIG)
            if source != "defaults"
            else cfg.from_dict({"data_root": "/data/span-{SPAN}"})
        )
        path = compiler.compile_to_file(config, str(tmp_path / "pipeline.yaml"))
        with open(path) as f:
            text = f.read()
    assert not _CREDENTIAL_LOOKING.search(text)
    # The Secret is referenced by name, its keys by name, and nothing else of it.
    assert security.OBJECT_STORE_SECRET in text


SECRET_BEAM_ARGS = [
    ["--s3_access_key_id=AKIAIOSFODNN7EXAMPLE"],
    ["--s3_secret_access_key=wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"],
    ["--s3_session_token", "FwoGZXIvYXdzEXAMPLE"],
    ["--azure_connection_string=DefaultEndpointsProtocol=https;AccountKey=abc"],
    ["--runner=FlinkRunner", "--my_service_password=hunter2"],
]


@pytest.mark.unit
@pytest.mark.parametrize("beam_args", SECRET_BEAM_ARGS, ids=lambda a: a[-1].split("=")[0])
def test_compiling_with_a_credential_in_beam_args_is_refused_in_one_line(
    beam_args, tmp_path, capsys
):
    config = tmp_path / "config.yaml"
    config.write_text(yaml.safe_dump({"beam_args": beam_args}))
    output = tmp_path / "pipeline.yaml"
    assert cli.main(["kfp", "compile", "--config", str(config), "-o", str(output)]) == 1
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert err.startswith("imgpipe: error: beam_args --")
    assert f"Kubernetes Secret {security.OBJECT_STORE_SECRET}" in err
    # The value is neither written nor echoed.
    assert not output.exists()
    value = beam_args[-1].split("=", 1)[-1]
    assert value not in err


@pytest.mark.unit
def test_ordinary_beam_args_are_not_taken_for_credentials():
    ordinary = [
        "--runner=FlinkRunner",
        "--flink_master=flink:8081",
        "--s3_endpoint_url=http://minio:9000",
        "--service_account_email=runner@example.iam.gserviceaccount.com",
        "--direct_num_workers=2",
    ]
    assert credentials.credential_flags(ordinary) == []


# ---- `imgpipe kfp run-local`'s Docker options ----------------------------------------


@pytest.mark.unit
def test_the_docker_runner_gets_the_same_restrictions():
    options = local_docker.runner_options({"A": "b"})
    assert options["user"] == f"{images.RUNTIME_UID}:{images.RUNTIME_GID}"
    assert options["read_only"] is security.CONTAINER_SECURITY_CONTEXT["readOnlyRootFilesystem"]
    assert options["cap_drop"] == security.CONTAINER_SECURITY_CONTEXT["capabilities"]["drop"]
    assert options["security_opt"] == ["no-new-privileges"]  # allowPrivilegeEscalation: false
    assert set(options["tmpfs"]) == {security.WRITABLE_TMP}
    assert options["environment"] == {"A": "b"}
    assert options["entrypoint"] == [""]  # Kubernetes' command replaces the ENTRYPOINT


@pytest.mark.unit
def test_run_local_without_a_docker_engine_is_one_line_naming_the_fix(
    tmp_path, monkeypatch, capsys
):
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/no-engine.sock")
    package = tmp_path / "pipeline.yaml"
    package.write_text(yaml.safe_dump({"pipelineInfo": {"name": "p"}, "root": {}}))
    code = cli.main(
        ["kfp", "run-local", "--package", str(package), "--pipeline-root", str(tmp_path / "r")]
    )
    err = capsys.readouterr().err.strip()
    assert code == 1 and len(err.splitlines()) == 1
    assert err.startswith(f"imgpipe: error: no Docker engine answers at unix://{tmp_path}")
    assert "start one" in err and "DOCKER_HOST" in err


@pytest.mark.unit
def test_folders_outside_the_pipeline_root_are_mounted_at_their_own_paths(tmp_path):
    root, data, serving = tmp_path / "root", tmp_path / "data", tmp_path / "serving"
    (data / "span-1").mkdir(parents=True)
    mounts = local_docker.volume_mounts(
        str(root),
        read_only=[str(data / "span-{SPAN}"), "s3://bucket/photos", str(root / "inside")],
        writable=[str(serving)],
    )
    assert [(m["Source"], m["Target"], m["ReadOnly"]) for m in mounts] == [
        (str(data), str(data), True),
        (str(serving), str(serving), False),
    ]
    assert serving.is_dir()  # made, so that Docker can bind it
    with pytest.raises(local_docker.LocalRunError, match="no such file or folder"):
        local_docker.volume_mounts(str(root), read_only=[str(tmp_path / "nowhere")], writable=[])


@pytest.mark.unit
@pytest.mark.parametrize("scheme", ["", "file://"])
def test_a_local_weights_file_is_mounted_read_only_at_its_own_path(tmp_path, scheme):
    from imgpipe.pipelines import config as pipeline_config

    weights = tmp_path / "notop.weights.h5"
    weights.write_bytes(b"weights")
    config = pipeline_config.load(None, [f"trainer.weights={scheme}{weights}"])
    assert config.trainer.weights_file == str(weights)
    mounts = local_docker.volume_mounts(
        str(tmp_path / "root"), [config.trainer.weights_file], writable=[]
    )
    assert [(m["Source"], m["Target"], m["ReadOnly"]) for m in mounts] == [
        (str(weights), str(weights), True)
    ]
    for other in ("imagenet", "gs://bucket/notop.weights.h5", "null"):
        assert pipeline_config.load(None, [f"trainer.weights={other}"]).trainer.weights_file is None


def _two_step_spec() -> dict:
    def component(outputs: list[str]) -> dict:
        return {"outputDefinitions": {"artifacts": {o: {} for o in outputs}}}

    return {
        "components": {"ImageExampleGen": component(["examples"]), "Trainer": component(["model"])},
        "root": {
            "dag": {
                "tasks": {
                    "first": {"componentRef": {"name": "ImageExampleGen"}},
                    "second": {"componentRef": {"name": "Trainer"}, "dependentTasks": ["first"]},
                }
            }
        },
    }


@pytest.mark.unit
def test_a_step_without_complete_outputs_is_reported_with_the_end_of_its_log(tmp_path):
    import io
    import json

    spec = _two_step_spec()
    folders = local_docker.task_folders(spec)
    examples = tmp_path / "examples"
    examples.mkdir()
    (tmp_path / folders["first"]).mkdir()
    (tmp_path / folders["first"] / "executor_output.json").write_text(
        json.dumps({"artifacts": {"examples": {"artifacts": [{"uri": str(examples)}]}}})
    )
    tails = local_docker._LogTail(io.StringIO())
    tails.write(f"12:00 - INFO - Executing task \x1b[96m'{folders['second']}'\x1b[0m\n")
    tails.write("    Traceback (most recent call last):\n    MemoryError: out of memory\n")
    with pytest.raises(local_docker.LocalRunError) as failed:
        local_docker.check_outputs(spec, str(tmp_path), tails)
    message = str(failed.value)
    assert message.startswith("step second failed: it wrote no executor_output.json")
    assert message.endswith("  |     MemoryError: out of memory")
    # An artifact the executor output names but that is not there is a failure too.
    (tmp_path / folders["second"]).mkdir()
    (tmp_path / folders["second"] / "executor_output.json").write_text(
        json.dumps({"artifacts": {"model": {"artifacts": [{"uri": str(tmp_path / "gone")}]}}})
    )
    with pytest.raises(local_docker.LocalRunError, match="step second failed: it left no model"):
        local_docker.check_outputs(spec, str(tmp_path), tails)
    os.makedirs(tmp_path / "gone")
    local_docker.check_outputs(spec, str(tmp_path), tails)


@pytest.mark.unit
def test_a_pusher_that_pushed_nothing_is_a_run_not_pushed_not_a_failed_step(tmp_path):
    """TFX makes no folder for a model it did not push (refused, not blessed): run-local
    reports it as `run local` does (exit 3), not as a Pusher that left no output."""
    import json

    from imgpipe.pipelines import component_ids as ids

    spec = {
        "components": {"Pusher": {"outputDefinitions": {"artifacts": {"pushed_model": {}}}}},
        "root": {"dag": {"tasks": {ids.PUSHER: {"componentRef": {"name": "Pusher"}}}}},
    }
    folder = tmp_path / local_docker.task_folders(spec)[ids.PUSHER]
    folder.mkdir()

    def pusher_wrote(metadata: dict) -> None:
        artifact = {"uri": str(tmp_path / "pushed_model"), "metadata": metadata}
        (folder / "executor_output.json").write_text(
            json.dumps({"artifacts": {"pushed_model": {"artifacts": [artifact]}}})
        )

    pusher_wrote({"pushed": 0.0, "refused": "not pushed: the candidate is worse"})
    local_docker.check_outputs(spec, str(tmp_path))
    assert not local_docker.run_result(spec, str(tmp_path)).pushed
    # Said pushed, and its folder is missing: a broken step.
    pusher_wrote({"pushed": 1.0})
    with pytest.raises(local_docker.LocalRunError, match="it left no pushed_model"):
        local_docker.check_outputs(spec, str(tmp_path))
    os.makedirs(tmp_path / "pushed_model")
    local_docker.check_outputs(spec, str(tmp_path))
    assert local_docker.run_result(spec, str(tmp_path)).pushed


@pytest.mark.unit
def test_the_run_folder_is_kfp_locals_not_a_serving_folder_the_run_made(tmp_path):
    """A serving directory under the pipeline root that the run's ChampionResolver made
    sorts after the run's folder; taken for it, a run that pushed was reported failed."""
    spec = {**_two_step_spec(), "pipelineInfo": {"name": "docker-test"}}
    (tmp_path / "data").mkdir()
    before = set(os.listdir(tmp_path))
    run = "docker-test-2026-11-27-16-36-42-044618"
    for name in (run, "serving", "docker-test-serving"):
        (tmp_path / name).mkdir()
    (tmp_path / "docker-test-2026-11-27-16-36-43-000000").write_text("")  # not a folder
    assert local_docker.run_folders(spec, str(tmp_path), before) == [run]
