"""trainer.workers > 1 on Kubeflow: the Trainer step's TFJob (components/trainer/
several_workers/: step_pod.py, tfjob_manifest.py, kubernetes_replicas.py,
kubernetes_jobs.py, kubernetes_tfjob.py; docs/distributed-training.md).

No Kubernetes runs here. The manifest is made from a real V1Pod as a KFP step's pod
looks, and checked against the TFJob CRD's schema (tests/crds/, from the Training
Operator's repository) and the kubernetes client's models. The launcher is run through
the real kubernetes client against a small fake API server (tests/fake_kubernetes.py,
shared with the JobSet's tests): the endpoints the launcher calls, with a scripted TFJob
controller behind them, which makes the replicas' pods and moves them through their
phases, and Kueue's suspension of a queued job. It checks what the launcher
asks for and does (create, follow, name the failed replica, delete), and that every
call it makes is one k8s/rbac.yaml's Role grants; not the Training Operator itself.
"""

from __future__ import annotations

import os
import re

import jsonschema
import pytest
import yaml

from imgpipe.components.trainer.several_workers import (
    choice,
    kubernetes_jobs,
    kubernetes_replicas,
    launchers,
    local_processes,
    replicas,
    tfjob_manifest,
)
from imgpipe.components.trainer.several_workers import step_pod as step_pod_lib
from imgpipe.pipelines.kubeflow import security
from tests.fake_kubernetes import (
    CLAIM,
    IMAGE,
    NAMESPACE,
    POD_NAME,
    POD_UID,
    FakeApiServer,
    as_served,
    assert_calls_are_granted,
    launcher_clock,  # noqa: F401 - an autouse fixture
    role_rules,
    run_launcher,
    served_step,
    step_pod,
)
from tests.test_k8s_manifests import strict_errors

pytestmark = pytest.mark.unit


SCHEMA_FILE = os.path.join(os.path.dirname(__file__), "crds", "kubeflow.org_tfjobs.v1.schema.yaml")


def undeclared(data, schema: dict, where: str = "") -> list[str]:
    """Fields of `data` the structural schema does not declare: the API server would
    prune them without a word."""
    if isinstance(data, dict) and schema.get("type") == "object":
        if "properties" not in schema:
            extra = schema.get("additionalProperties")
            if isinstance(extra, dict):
                return [e for k, v in data.items() for e in undeclared(v, extra, f"{where}.{k}")]
            return []
        return [
            e
            for k, v in data.items()
            for e in (
                undeclared(v, schema["properties"][k], f"{where}.{k}")
                if k in schema["properties"]
                else [f"{where}.{k}"]
            )
        ]
    if isinstance(data, list) and "items" in schema:
        return [
            e for i, v in enumerate(data) for e in undeclared(v, schema["items"], f"{where}[{i}]")
        ]
    return []


@pytest.fixture(scope="module")
def schema() -> dict:
    with open(SCHEMA_FILE) as f:
        return yaml.safe_load(f)


def check_against_the_crd(body: dict, schema: dict) -> None:
    jsonschema.validate(body, schema)
    assert undeclared(body, schema) == []
    template = body["spec"]["tfReplicaSpecs"][tfjob_manifest.REPLICA_TYPE]["template"]
    assert strict_errors(template, "V1PodTemplateSpec", "template") == []


# --- the manifest -------------------------------------------------------------------


def test_the_tfjob_validates_against_the_crd_and_carries_the_steps_settings(schema):
    body = tfjob_manifest.manifest(
        as_served(step_pod()), 3, "s3://bucket/root/model_run/.workers-job"
    )
    check_against_the_crd(body, schema)
    assert body["apiVersion"] == "kubeflow.org/v1" and body["kind"] == "TFJob"
    metadata = body["metadata"]
    assert metadata["namespace"] == NAMESPACE
    assert metadata["name"] == step_pod_lib.job_name(POD_UID) and len(metadata["name"]) <= 40
    assert metadata["ownerReferences"] == [
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "name": POD_NAME,
            "uid": POD_UID,
            "blockOwnerDeletion": False,
        }
    ]
    assert body["spec"]["runPolicy"] == {"backoffLimit": 0, "cleanPodPolicy": "Running"}
    assert body["spec"]["successPolicy"] == "AllWorkers"
    replica = body["spec"]["tfReplicaSpecs"]["Worker"]
    assert replica["replicas"] == 3 and replica["restartPolicy"] == "Never"
    pod = replica["template"]["spec"]
    (container,) = pod["containers"]
    assert container["name"] == "tensorflow" and container["image"] == IMAGE
    assert container["command"] == [
        "python",
        "-m",
        "imgpipe.components.trainer.several_workers.worker",
        "s3://bucket/root/model_run/.workers-job",
    ]
    assert container["ports"] == [{"name": "tfjob-port", "containerPort": 2222, "protocol": "TCP"}]
    # The step's GPU request, security context, node selector and tolerations.
    assert container["resources"]["limits"] == {"nvidia.com/gpu": "2"}
    assert container["resources"]["requests"]["nvidia.com/gpu"] == "2"
    assert container["securityContext"]["runAsUser"] == 1000
    assert container["securityContext"]["capabilities"] == {"drop": ["ALL"]}
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    assert pod["nodeSelector"] == {"cloud.google.com/gke-accelerator": "nvidia-l4"}
    assert pod["tolerations"] == [
        {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
    ]
    # The object-store Secret's keys; the launcher choice stays with the Trainer.
    env = {e["name"]: e for e in container["env"]}
    for name in security.SECRET_ENV:
        assert env[name]["valueFrom"]["secretKeyRef"] == {
            "name": security.OBJECT_STORE_SECRET,
            "key": name,
            "optional": True,
        }
    assert choice.LAUNCHER_ENV not in env and env["TMPDIR"]["value"] == "/tmp"
    # The claim and the emptyDirs, not the step's API token nor Argo's container.
    assert {v["name"] for v in pod["volumes"]} == {"data", "imgpipe-tmp", "kfp-launcher"}
    assert {m["mountPath"] for m in container["volumeMounts"]} == {
        "/mnt/imgpipe",
        "/tmp",
        "/kfp-launcher",
    }
    assert pod["automountServiceAccountToken"] is False and "serviceAccountName" not in pod
    # Not the step pod's (the cluster's default, which KFP 2.16 cannot change): the
    # project's grace period between SIGTERM and SIGKILL.
    assert pod["terminationGracePeriodSeconds"] == step_pod_lib.TERMINATION_GRACE_PERIOD_S == 60


def test_the_grace_period_is_a_field_the_crd_declares_as_an_integer(schema):
    """A misspelt or mistyped grace period would be pruned or refused by the API server;
    the CRD declares it on the replicas' pod template as an int64."""
    pod_schema = schema["properties"]["spec"]["properties"]["tfReplicaSpecs"][
        "additionalProperties"
    ]["properties"]["template"]["properties"]["spec"]
    assert pod_schema["properties"]["terminationGracePeriodSeconds"] == {
        "format": "int64",
        "type": "integer",
    }
    body = tfjob_manifest.manifest(as_served(step_pod()), 2, "/mnt/imgpipe/job")
    template = body["spec"]["tfReplicaSpecs"]["Worker"]["template"]["spec"]
    template["terminationGracePeriodSeconds"] = "60"
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(body, schema)


def test_the_crd_check_catches_a_misspelt_and_a_mistyped_field(schema):
    body = tfjob_manifest.manifest(as_served(step_pod()), 2, "/mnt/imgpipe/job")
    body["spec"]["runPolicy"]["cleanPodPolicyy"] = "All"
    assert undeclared(body, schema) == [".spec.runPolicy.cleanPodPolicyy"]
    body = tfjob_manifest.manifest(as_served(step_pod()), 2, "/mnt/imgpipe/job")
    body["spec"]["tfReplicaSpecs"]["Worker"]["replicas"] = "2"
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(body, schema)


def test_a_pod_without_the_steps_container_is_named():
    pod = as_served(step_pod())
    pod["spec"]["containers"] = [{"name": "a", "image": "x"}, {"name": "b", "image": "y"}]
    with pytest.raises(
        ValueError, match=rf"pod {POD_NAME} has no container 'main' among \['a', 'b'\]"
    ):
        tfjob_manifest.manifest(pod, 2, "/mnt/imgpipe/job")


def test_only_paths_on_an_object_store_or_the_claim_are_shared():
    mounts = step_pod_lib.shared_mounts(as_served(step_pod()))
    assert mounts == {"/mnt/imgpipe": CLAIM}
    kubernetes_jobs.check_shared(["s3://b/x", "gs://b/y", "/mnt/imgpipe/root/x"], mounts, 2)
    for path in ("/tmp/imgpipe-shards-1/x", "/mnt/imgpipe-other/x", "/s3/bucket/root"):
        with pytest.raises(kubernetes_replicas.KubernetesUnavailable) as e:
            kubernetes_jobs.check_shared(["s3://b/x", path], mounts, 2)
        assert str(e.value).startswith(
            f"trainer.workers=2: {path} is on the Trainer pod's own disk"
        )
        assert "\n" not in str(e.value) and "kubeflow.pvc_name" in str(e.value)


# --- the launcher, through the kubernetes client, against a fake API server ---------


@pytest.fixture
def in_step_pod(monkeypatch):
    monkeypatch.setenv(choice.POD_NAME_ENV, POD_NAME)
    monkeypatch.setenv(choice.POD_NAMESPACE_ENV, NAMESPACE)


def test_a_tfjob_that_succeeds_streams_the_chiefs_log_keeps_every_log_and_is_deleted(
    in_step_pod, tmp_path, schema, capfd
):
    def script(polls):
        if polls < 3:
            return [("Pending", None), ("Pending", None)], None
        if polls < 6:
            return [("Running", None), ("Running", None)], "Running"
        return [("Succeeded", 0), ("Succeeded", 0)], "Succeeded"

    server = FakeApiServer(
        served_step(tmp_path), script, {0: "epoch 1/3\nchief done\n", 1: "worker 1 done\n"}
    )
    try:
        folder = run_launcher(server, tmp_path)
    finally:
        server.close()
    (name,) = server.jobs
    check_against_the_crd(server.jobs[name], schema)
    assert (
        server.jobs[name]["spec"]["tfReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0][
            "command"
        ][-1]
        == folder
    )
    assert replicas.load_job(folder) == {"the": "job"}
    assert server.deleted == [name]
    assert "chief done" in capfd.readouterr().err
    logs = tmp_path / "model_run" / "workers"
    assert (logs / "worker-0.log").read_text() == "epoch 1/3\nchief done\n"
    assert (logs / "worker-1.log").read_text() == "worker 1 done\n"
    assert_calls_are_granted(server.calls)


def test_a_failed_replica_is_named_in_one_line_and_the_tfjob_is_deleted(in_step_pod, tmp_path):
    def script(polls):
        if polls < 3:
            return [("Running", None), ("Running", None)], "Running"
        return [("Running", None), ("Failed", 137)], "Running"

    log = (
        "epoch 1/3\nTraceback ...\n"
        "imgpipe-worker-error: ResourceExhaustedError: OOM when allocating\n"
    )
    server = FakeApiServer(served_step(tmp_path), script, {0: "epoch 1/3\n", 1: log})
    try:
        with pytest.raises(replicas.WorkersFailed) as e:
            run_launcher(server, tmp_path)
    finally:
        server.close()
    (name,) = server.jobs
    message = str(e.value)
    assert "\n" not in message
    assert message.startswith(
        f"trainer worker 1 of 2 (pod {NAMESPACE}/{name}-worker-1) exited with code 137 "
        "(OOMKilled): ResourceExhaustedError: OOM when allocating; the TFJob was deleted"
    )
    assert "nothing was exported" in message
    assert server.deleted == [name]
    assert (tmp_path / "model_run" / "workers" / "worker-1.log").read_text() == log
    assert_calls_are_granted(server.calls)


def test_a_replica_refusing_a_setting_becomes_the_trainers_value_error(in_step_pod, tmp_path):
    def script(polls):
        return [("Failed", 1), ("Running", None)], "Running"

    log = "imgpipe-worker-error: ValueError: trainer.batch_size=0 must be 1 or more\n"
    server = FakeApiServer(served_step(tmp_path), script, {0: log})
    try:
        with pytest.raises(
            ValueError,
            match=r"^trainer worker 0 of 2 \(pod .*-worker-0\): trainer.batch_size=0 must be 1 "
            r"or more \(trainer.workers=2\)$",
        ):
            run_launcher(server, tmp_path)
    finally:
        server.close()
    assert len(server.deleted) == 1


def test_a_tfjob_the_operator_failed_is_reported_with_its_message(in_step_pod, tmp_path):
    server = FakeApiServer(served_step(tmp_path), lambda polls: ([], "Failed"), {})
    try:
        with pytest.raises(
            replicas.WorkersFailed,
            match=r"^TFJob imgpipe/imgpipe-train-\w+ failed: TFJob .* is Failed; nothing was "
            "exported",
        ):
            run_launcher(server, tmp_path)
    finally:
        server.close()
    assert len(server.deleted) == 1


@pytest.mark.parametrize(
    "refused,status,expected",
    [
        (
            ("tfjobs", "create"),
            404,
            r"^cannot create TFJob imgpipe/imgpipe-train-\w+: this cluster has no TFJob "
            r"resource \(kubeflow.org/v1\); install the Kubeflow Training Operator v1.9, or "
            r"set trainer.launcher=jobset on a cluster with JobSet, or trainer.workers=1$",
        ),
        (
            ("tfjobs", "create"),
            403,
            r"may not create TFJob imgpipe/imgpipe-train-\w+ \(create tfjobs\): "
            r"apply k8s/rbac.yaml",
        ),
        (
            ("pods", "get"),
            403,
            rf"may not read its own pod {NAMESPACE}/{POD_NAME} \(get pods\): apply k8s/rbac.yaml",
        ),
    ],
)
def test_a_cluster_that_cannot_run_the_tfjob_is_one_line_naming_the_fix(
    in_step_pod, tmp_path, refused, status, expected
):
    server = FakeApiServer(served_step(tmp_path), lambda polls: ([], None), {}, {refused: status})
    try:
        with pytest.raises(kubernetes_replicas.KubernetesUnavailable, match=expected) as e:
            run_launcher(server, tmp_path)
    finally:
        server.close()
    assert "\n" not in str(e.value) and server.deleted == []


def test_outside_a_pod_the_kubernetes_launcher_names_the_setting_and_the_fix(monkeypatch, tmp_path):
    monkeypatch.delenv(choice.POD_NAME_ENV, raising=False)
    with pytest.raises(
        kubernetes_replicas.KubernetesUnavailable,
        match=r"needs the Trainer pod's name and namespace in IMGPIPE_POD_NAME",
    ):
        kubernetes_jobs.KubernetesJobs().run({}, 2, str(tmp_path), str(tmp_path))
    monkeypatch.setenv(choice.POD_NAME_ENV, POD_NAME)
    monkeypatch.setenv(choice.POD_NAMESPACE_ENV, NAMESPACE)
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    with pytest.raises(
        kubernetes_replicas.KubernetesUnavailable,
        match=r"^IMGPIPE_TRAINER_LAUNCHER=kubernetes creates a TFJob or a JobSet from the "
        r"Trainer's pod, and this process is not in a Kubernetes pod .*; run the compiled "
        r"package on Kubeflow, or set trainer.workers=1",
    ):
        kubernetes_jobs.KubernetesJobs("jobset").run({}, 2, str(tmp_path), str(tmp_path))


def test_an_unknown_launcher_is_refused_naming_the_variable(monkeypatch):
    monkeypatch.setenv(choice.LAUNCHER_ENV, "slurm")
    with pytest.raises(
        ValueError,
        match=r"IMGPIPE_TRAINER_LAUNCHER='slurm' names no launcher .* use one of "
        "processes, kubernetes",
    ):
        launchers.launcher(lambda: [], "tfjob")
    monkeypatch.setenv(choice.LAUNCHER_ENV, choice.KUBERNETES)
    for kind in ("tfjob", "jobset"):
        launcher = launchers.launcher(lambda: [], kind)
        assert isinstance(launcher, kubernetes_jobs.KubernetesJobs)
        assert launcher._kind is kubernetes_jobs.KINDS[kind]
    # The kind of job, refused in one line naming the two (trainer.launcher's check
    # refuses it first, when the config is loaded).
    with pytest.raises(
        ValueError, match=r"^trainer.launcher 'slurm' is unknown; choose one of tfjob, jobset$"
    ):
        launchers.launcher(lambda: [], "slurm")
    monkeypatch.delenv(choice.LAUNCHER_ENV)
    assert launchers.launcher(lambda: ["0", "1"], "tfjob") == local_processes.LocalProcesses(
        ["0", "1"]
    )


# --- the Role ------------------------------------------------------------------------


def test_the_role_grants_the_trainer_exactly_the_calls_it_makes():
    unnamed = {
        (group, resource): frozenset(rule["verbs"])
        for rule in role_rules()
        if "resourceNames" not in rule
        for group in rule["apiGroups"]
        for resource in rule["resources"]
    }
    # The launcher's rules for either kind of job (tests/test_kubeflow_jobset.py).
    assert unnamed == kubernetes_jobs.API_RULES
    # No update, patch, watch, deletecollection; nothing on pods but reading them.
    assert all(verbs <= {"create", "get", "list", "delete"} for verbs in unnamed.values())
    assert unnamed[("", "pods")] == {"get", "list"}


def test_the_crd_schema_is_the_releases_own_with_only_descriptions_left_out():
    from tests.crds import extract_schema

    with open(SCHEMA_FILE) as f:
        header = f.read(600)
    assert "github.com/kubeflow/training-operator@v1.9" in header and "sha256 " in header
    node = {
        "description": "dropped",
        "properties": {"description": {"type": "string", "description": "dropped too"}},
    }
    assert extract_schema.without_descriptions(node) == {
        "properties": {"description": {"type": "string"}}
    }


def _unstarted_failure(server: FakeApiServer, tmp_path, start_timeout_s: float) -> str:
    try:
        with pytest.raises(replicas.WorkersFailed) as e:
            run_launcher(server, tmp_path, start_timeout_s=start_timeout_s)
    finally:
        server.close()
    (name,) = server.jobs
    assert server.deleted == [name]
    assert "\n" not in str(e.value) and "nothing was exported" in str(e.value)
    assert_calls_are_granted(server.calls)
    return str(e.value)


def test_a_replica_that_cannot_be_scheduled_fails_the_training_once_the_start_bound_passes(
    in_step_pod, tmp_path
):
    server = FakeApiServer(
        served_step(tmp_path), lambda polls: ([("Running", None), ("Pending", None)], None), {}
    )
    server.pending_status = {
        "conditions": [
            {
                "type": "PodScheduled",
                "status": "False",
                "reason": "Unschedulable",
                "message": "0/3 nodes are available: 3 Insufficient nvidia.com/gpu.",
            }
        ]
    }
    message = _unstarted_failure(server, tmp_path, start_timeout_s=0.3)
    assert re.match(
        r"trainer worker 1 of 2 \(pod .*-worker-1\) has not started after \d+ s: it cannot be "
        r"scheduled: 0/3 nodes are available: 3 Insufficient nvidia.com/gpu.; the TFJob was",
        message,
    ), message
    assert server.polls > 1  # it waited for the bound, not failing at the first Pending


def test_a_replica_whose_image_name_is_invalid_fails_at_once(in_step_pod, tmp_path):
    server = FakeApiServer(
        served_step(tmp_path), lambda polls: ([("Pending", None), ("Pending", None)], None), {}
    )
    server.pending_status = {
        "containerStatuses": [
            {
                "name": tfjob_manifest.CONTAINER,
                "ready": False,
                "restartCount": 0,
                "image": IMAGE,
                "imageID": "",
                "state": {"waiting": {"reason": "InvalidImageName", "message": "bad ref"}},
            }
        ]
    }
    message = _unstarted_failure(server, tmp_path, start_timeout_s=3600.0)
    assert "worker 0 of 2" in message
    assert "its container waits: InvalidImageName: bad ref" in message


def test_a_tfjob_without_pods_names_the_operator(in_step_pod, tmp_path):
    server = FakeApiServer(served_step(tmp_path), lambda polls: ([], None), {})
    message = _unstarted_failure(server, tmp_path, start_timeout_s=0.2)
    assert message.startswith("trainer worker 0 of 2 has not started after")
    assert "the Training Operator has made no pod for it" in message


def test_an_api_server_that_fails_a_few_polls_does_not_fail_the_training(in_step_pod, tmp_path):
    def script(polls):
        if polls < 8:
            return [("Running", None), ("Running", None)], "Running"
        return [("Succeeded", 0), ("Succeeded", 0)], "Succeeded"

    server = FakeApiServer(served_step(tmp_path), script, {0: "chief done\n"})
    server.failing_polls = {2, 3, 5}
    try:
        run_launcher(server, tmp_path)
    finally:
        server.close()
    assert server.polls >= 8 and len(server.deleted) == 1


def test_an_api_server_gone_past_the_outage_bound_fails_in_one_line(in_step_pod, tmp_path):
    server = FakeApiServer(
        served_step(tmp_path), lambda polls: ([("Running", None), ("Running", None)], None), {}
    )
    server.api_gone_after = 4
    try:
        with pytest.raises(replicas.WorkersFailed) as e:
            run_launcher(server, tmp_path, api_outage_s=0.3)
    finally:
        server.close()
    (name,) = server.jobs
    assert str(e.value).startswith(
        f"the Kubernetes API has not answered the Trainer about TFJob {NAMESPACE}/{name} for "
        "0 s (503 Service Unavailable); nothing was exported"
    )
    assert "\n" not in str(e.value) and server.polls == 4
