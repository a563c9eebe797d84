"""trainer.launcher: jobset, and the Kueue queue label and queue (components/trainer/
several_workers/: jobset_manifest.py, indexed_tf_config.py, kubernetes_jobset.py,
kubernetes_jobs.py; components/common/runtime/kueue.py; docs/distributed-training.md).

No Kubernetes runs here. The JobSet is made from the same V1Pod as the TFJob
(tests/fake_kubernetes.py) and checked against JobSet v0.12.0's own CRD schema
(tests/crds/, fetched by bin/refresh-crds) and the kubernetes client's models; each
worker's TF_CONFIG is made from the manifest's own environment and the index Kubernetes
gives the pod; the queue label is checked on both kinds of job against their CRDs; the
manifests docs/distributed-training.md shows are these functions' output. The launcher
is run through the real kubernetes client against the fake API server
(tests/fake_kubernetes.py) with a scripted JobSet controller and Kueue's suspension:
success, a failed worker, a JobSet that fails, workers that never start, a queued or
preempted JobSet, the API going away, and a cluster that refuses the JobSet.
"""

from __future__ import annotations

import json
import os
import re

import jsonschema
import kubernetes
import pytest
import yaml

from imgpipe.components.common.runtime import kueue
from imgpipe.components.trainer.config import TrainerConfig
from imgpipe.components.trainer.several_workers import (
    choice,
    indexed_tf_config,
    jobset_manifest,
    kubernetes_jobs,
    kubernetes_replicas,
    replicas,
    tfjob_manifest,
)
from imgpipe.components.trainer.several_workers import step_pod as step_pod_lib
from imgpipe.pipelines.kubeflow import security
from tests.fake_kubernetes import (
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
from tests.test_kubeflow_tfjob import undeclared

pytestmark = pytest.mark.unit


CRDS = os.path.join(os.path.dirname(__file__), "crds")
JOBSET_SCHEMA = os.path.join(CRDS, "jobset.x-k8s.io_jobsets.v1alpha2.schema.yaml")
TFJOB_SCHEMA = os.path.join(CRDS, "kubeflow.org_tfjobs.v1.schema.yaml")
DOC = os.path.join(os.path.dirname(os.path.dirname(__file__)), "docs", "distributed-training.md")
FOLDER = "s3://bucket/root/model_run/.workers-job"


@pytest.fixture(scope="module")
def schema() -> dict:
    with open(JOBSET_SCHEMA) as f:
        return yaml.safe_load(f)


@pytest.fixture(scope="module")
def tfjob_schema() -> dict:
    with open(TFJOB_SCHEMA) as f:
        return yaml.safe_load(f)


def job_template(body: dict) -> dict:
    (replicated,) = body["spec"]["replicatedJobs"]
    return replicated["template"]


def check_against_the_crd(body: dict, schema: dict) -> None:
    """The CRD's structural schema, nothing it would prune, and the Job template as the
    kubernetes client's V1JobTemplateSpec knows it (its pod template included). The
    CRD's CEL rules are immutability checks and one about startupPolicy, which a create
    without startupPolicy meets."""
    jsonschema.validate(body, schema)
    assert undeclared(body, schema) == []
    assert strict_errors(job_template(body), "V1JobTemplateSpec", "template") == []


def env_of(container: dict) -> dict[str, dict]:
    return {e["name"]: e for e in container.get("env") or []}


# --- the manifest -------------------------------------------------------------------


def test_the_jobset_validates_against_the_crd_and_runs_the_tfjobs_pods(schema):
    pod = as_served(step_pod())
    body = jobset_manifest.manifest(pod, 3, FOLDER)
    check_against_the_crd(body, schema)
    assert body["apiVersion"] == "jobset.x-k8s.io/v1alpha2" and body["kind"] == "JobSet"
    tf = tfjob_manifest.manifest(pod, 3, FOLDER)
    metadata = body["metadata"]
    assert metadata["name"] == step_pod_lib.job_name(POD_UID) == tf["metadata"]["name"]
    assert metadata["namespace"] == NAMESPACE
    # Owned by the step's pod, as the TFJob; never as its controller (Kueue would take
    # the JobSet for a part of the pod's own workload).
    assert metadata["ownerReferences"] == tf["metadata"]["ownerReferences"]
    assert metadata["ownerReferences"][0]["name"] == POD_NAME
    assert "controller" not in metadata["ownerReferences"][0]
    assert kueue.QUEUE_LABEL not in metadata["labels"]
    spec = body["spec"]
    assert spec["network"] == {"enableDNSHostnames": True, "publishNotReadyAddresses": True}
    assert spec["successPolicy"] == {"operator": "All", "targetReplicatedJobs": ["worker"]}
    assert spec["failurePolicy"] == {"maxRestarts": 0}
    assert "suspend" not in spec  # Kueue's webhook suspends a queued JobSet itself
    (replicated,) = spec["replicatedJobs"]
    assert replicated["name"] == "worker" and replicated["replicas"] == 1
    job = replicated["template"]["spec"]
    assert {k: v for k, v in job.items() if k != "template"} == {
        "parallelism": 3,
        "completions": 3,
        "completionMode": "Indexed",
        "backoffLimit": 0,
    }
    # The TFJob's pod, but for the port's name, the addresses and the restart policy.
    template = job["template"]
    tf_template = tf["spec"]["tfReplicaSpecs"]["Worker"]["template"]
    assert template["metadata"] == tf_template["metadata"]
    pod_spec = dict(template["spec"])
    assert pod_spec.pop("restartPolicy") == "Never"
    (container,) = pod_spec.pop("containers")
    (tf_container,) = tf_template["spec"]["containers"]
    assert pod_spec == {k: v for k, v in tf_template["spec"].items() if k != "containers"}
    assert container["name"] == "tensorflow" and container["image"] == IMAGE
    assert container["command"] == [*choice.WORKER_COMMAND, FOLDER]
    assert container["ports"] == [{"name": "tf-worker", "containerPort": 2222, "protocol": "TCP"}]
    for key in ("resources", "securityContext", "volumeMounts", "envFrom", "imagePullPolicy"):
        assert container.get(key) == tf_container.get(key), key
    assert container["resources"]["limits"] == {"nvidia.com/gpu": "2"}
    assert pod_spec["nodeSelector"] == {"cloud.google.com/gke-accelerator": "nvidia-l4"}
    assert pod_spec["automountServiceAccountToken"] is False
    assert pod_spec["terminationGracePeriodSeconds"] == step_pod_lib.TERMINATION_GRACE_PERIOD_S
    env = env_of(container)
    assert {k: v for k, v in env.items() if k != indexed_tf_config.ADDRESSES_ENV} == env_of(
        tf_container
    )
    for name in security.SECRET_ENV:
        assert env[name]["valueFrom"]["secretKeyRef"]["name"] == security.OBJECT_STORE_SECRET
    name = metadata["name"]
    assert env[indexed_tf_config.ADDRESSES_ENV]["value"] == ",".join(
        f"{name}-worker-0-{i}.{name}:2222" for i in range(3)
    )


def test_the_steps_launcher_settings_stay_with_the_step(schema):
    """The Trainer's own variables (the launcher, the queue; a TF_CONFIG) are not the
    workers'."""
    pod = as_served(step_pod())
    (main,) = [c for c in pod["spec"]["containers"] if c["name"] == "main"]
    main["env"] += [
        {"name": kueue.QUEUE_ENV, "value": "gpu"},
        {"name": "TF_CONFIG", "value": "{}"},
    ]
    body = jobset_manifest.manifest(pod, 2, FOLDER)
    check_against_the_crd(body, schema)
    (container,) = job_template(body)["spec"]["template"]["spec"]["containers"]
    env = env_of(container)
    assert not {choice.LAUNCHER_ENV, kueue.QUEUE_ENV, "TF_CONFIG"} & set(env)
    assert env["TMPDIR"]["value"] == "/tmp"


def test_every_workers_host_name_is_a_dns_label():
    """The Job controller names each pod's host `<job>-<index>`; a host name over 63
    characters would not resolve."""
    name = jobset_manifest.job_name("f" * 36)
    for address in jobset_manifest.worker_addresses(name, 1000):
        host, subdomain = address.split(":")[0].split(".")
        assert len(host) <= 63 and re.fullmatch(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?", host), host
        assert subdomain == name
    assert jobset_manifest.worker_addresses("js", 2) == (
        "js-worker-0-0.js:2222",
        "js-worker-0-1.js:2222",
    )


def test_the_crd_check_catches_a_misspelt_and_a_mistyped_field(schema):
    body = jobset_manifest.manifest(as_served(step_pod()), 2, FOLDER)
    job_template(body)["spec"]["completionMod"] = "Indexed"
    assert undeclared(body, schema) == [".spec.replicatedJobs[0].template.spec.completionMod"]
    body = jobset_manifest.manifest(as_served(step_pod()), 2, FOLDER)
    job_template(body)["spec"]["parallelism"] = "2"
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(body, schema)
    body = jobset_manifest.manifest(as_served(step_pod()), 2, FOLDER)
    body["spec"]["successPolicy"]["operator"] = "Every"
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(body, schema)


def test_a_pod_without_the_steps_container_is_named():
    pod = as_served(step_pod())
    pod["spec"]["containers"] = [{"name": "a", "image": "x"}, {"name": "b", "image": "y"}]
    with pytest.raises(ValueError, match=rf"pod {POD_NAME} has no container 'main'"):
        jobset_manifest.manifest(pod, 2, FOLDER)


def test_the_jobset_crd_schema_is_the_releases_own():
    from tests.crds import extract_schema

    with open(JOBSET_SCHEMA) as f:
        header = f.read(700)
    assert "sigs.k8s.io/jobset@v0.12.0" in header and "sha256 " in header
    assert "(jobset.x-k8s.io/v1alpha2)" in header
    crd = {
        "metadata": {"name": "jobsets.jobset.x-k8s.io"},
        "spec": {"versions": [{"name": "v1alpha1", "served": False}]},
    }
    with pytest.raises(ValueError, match=r"serves no version v1alpha2; it has \[\]$"):
        extract_schema.served_schema(crd, "v1alpha2")


# --- each worker's TF_CONFIG -----------------------------------------------------------


def test_each_pod_makes_its_tf_config_from_the_addresses_and_its_index():
    """What the worker's entrypoint will do in each pod: the template's environment, and
    the index Kubernetes sets, give cluster.py's own TF_CONFIG for that worker."""
    from imgpipe.components.trainer.several_workers import cluster

    body = jobset_manifest.manifest(as_served(step_pod()), 3, FOLDER)
    (container,) = job_template(body)["spec"]["template"]["spec"]["containers"]
    template_env = {e["name"]: e["value"] for e in container["env"] if "value" in e}
    addresses = jobset_manifest.worker_addresses(body["metadata"]["name"], 3)
    for index in range(3):
        env = {**template_env, indexed_tf_config.INDEX_ENV: str(index)}
        text = indexed_tf_config.tf_config_from_env(env)
        assert text == cluster.tf_config(cluster.Member(addresses, index))
        assert cluster.from_tf_config(text) == cluster.Member(addresses, index)
        assert json.loads(text)["task"] == {"type": "worker", "index": index}


def test_a_tf_config_already_given_wins_and_none_is_none():
    given = {"TF_CONFIG": '{"cluster": {}}', indexed_tf_config.ADDRESSES_ENV: "a:1,b:1"}
    assert indexed_tf_config.tf_config_from_env(given) == '{"cluster": {}}'
    assert indexed_tf_config.tf_config_from_env({}) is None
    assert indexed_tf_config.tf_config_from_env({indexed_tf_config.ADDRESSES_ENV: " "}) is None


@pytest.mark.parametrize(
    "env,expected",
    [
        ({"IMGPIPE_WORKER_ADDRESSES": "a:1,b:1"}, r"JOB_COMPLETION_INDEX is '', not a pod index"),
        (
            {"IMGPIPE_WORKER_ADDRESSES": "a:1,b:1", "JOB_COMPLETION_INDEX": "-1"},
            r"JOB_COMPLETION_INDEX is '-1', not a pod index",
        ),
        (
            {"IMGPIPE_WORKER_ADDRESSES": "a:1,b:1", "JOB_COMPLETION_INDEX": "2"},
            r"^worker index 2 is not one of 2 workers \(a:1, b:1\)",
        ),
        (
            {"IMGPIPE_WORKER_ADDRESSES": "a:1", "JOB_COMPLETION_INDEX": "0"},
            r"^worker index 0 is not one of 1 workers",
        ),
        (
            {"IMGPIPE_WORKER_ADDRESSES": "a:1,,b:1", "JOB_COMPLETION_INDEX": "0"},
            r"must list each worker's host:port once",
        ),
        (
            {"IMGPIPE_WORKER_ADDRESSES": "a:1,a:1", "JOB_COMPLETION_INDEX": "0"},
            r"must list each worker's host:port once",
        ),
    ],
)
def test_a_pod_that_cannot_tell_its_place_is_refused_in_one_line(env, expected):
    with pytest.raises(ValueError, match=expected) as e:
        indexed_tf_config.tf_config_from_env(env)
    assert "\n" not in str(e.value)


# --- Kueue ------------------------------------------------------------------------------


def test_the_queue_label_goes_on_either_job_and_both_stay_valid(schema, tfjob_schema):
    from tests.test_kubeflow_tfjob import check_against_the_crd as check_tfjob

    pod = as_served(step_pod())
    for body, check, job_schema in (
        (jobset_manifest.manifest(pod, 2, FOLDER), check_against_the_crd, schema),
        (tfjob_manifest.manifest(pod, 2, FOLDER), check_tfjob, tfjob_schema),
    ):
        queued = kueue.with_queue(body, "gpu-a100")
        check(queued, job_schema)
        assert queued["metadata"]["labels"] == {
            **body["metadata"]["labels"],
            "kueue.x-k8s.io/queue-name": "gpu-a100",
        }
        assert kueue.QUEUE_LABEL not in body["metadata"]["labels"]  # a copy
        # The job alone: Kueue admits it as one workload, its pods with it.
        assert kueue.QUEUE_LABEL not in json.dumps(queued["spec"])
        assert kueue.with_queue(body, None) == body


@pytest.mark.parametrize("name", ["GPU", "gpu_queue", "-gpu", "gpu-", "g" * 64, "", "gpu queue"])
def test_a_name_no_local_queue_can_have_is_refused(name):
    with pytest.raises(ValueError, match=r"is not a Kueue LocalQueue name: at most 63") as e:
        kueue.check_queue_name(name, "kubeflow.queue_name")
    assert "\n" not in str(e.value)
    with pytest.raises(ValueError):
        kueue.with_queue({"metadata": {}}, name)


def test_the_queue_reaches_the_trainer_through_its_environment():
    assert kueue.queue_from_env({}) is None
    assert kueue.queue_from_env({kueue.QUEUE_ENV: ""}) is None
    assert kueue.queue_from_env({kueue.QUEUE_ENV: "team-a.gpu"}) == "team-a.gpu"
    with pytest.raises(ValueError, match=r"^IMGPIPE_KUEUE_QUEUE 'Team A' is not a Kueue"):
        kueue.queue_from_env({kueue.QUEUE_ENV: "Team A"})


# --- the setting ------------------------------------------------------------------------


def test_the_launcher_is_tfjob_unless_set_and_a_bad_name_is_refused_in_one_line():
    from imgpipe.pipelines import config as cfg

    assert TrainerConfig().launcher == "tfjob"
    TrainerConfig(launcher="jobset").validate()
    for bad in ("slurm", "JobSet", "kubernetes", ""):
        with pytest.raises(ValueError) as e:
            cfg.from_dict({"trainer": {"workers": 2, "launcher": bad}})
        assert str(e.value) == (
            f"config: trainer.launcher {bad!r} is unknown; choose one of tfjob, jobset"
        )


def test_a_bad_queue_name_is_refused_when_the_config_is_loaded():
    from imgpipe.pipelines import config as cfg

    assert cfg.from_dict({"kubeflow": {"queue_name": "gpu"}}).kubeflow.queue_name == "gpu"
    assert cfg.from_dict({}).kubeflow.queue_name is None
    with pytest.raises(ValueError) as e:
        cfg.from_dict({"kubeflow": {"queue_name": "GPU_queue"}})
    assert str(e.value).startswith(
        "config: kubeflow.queue_name 'GPU_queue' is not a Kueue LocalQueue name"
    )


# --- the Role ------------------------------------------------------------------------


def test_the_role_grants_what_each_launcher_calls_and_no_more():
    unnamed = {
        (group, resource): frozenset(rule["verbs"])
        for rule in role_rules()
        if "resourceNames" not in rule
        for group in rule["apiGroups"]
        for resource in rule["resources"]
    }
    assert unnamed == kubernetes_jobs.API_RULES
    assert unnamed[("jobset.x-k8s.io", "jobsets")] == {"create", "get", "delete"}


# --- the manifests the docs show --------------------------------------------------------

_SHOWN = re.compile(r"<!-- manifest: (\w+) -->\n```yaml\n(.*?)```", re.S)
DOC_QUEUE = "gpu-queue"
DOC_FOLDER = "s3://imgpipe/root/Trainer/model_run/7/.workers-job"


def doc_pod() -> dict:
    """A Trainer step's pod as docs/distributed-training.md shows it: one GPU, the
    claim, the object-store Secret's keys, the GPU node pool."""
    c = kubernetes.client
    main = c.V1Container(
        name="main",
        image="ghcr.io/tfx-image-pipeline/tfx-image-pipeline-gpu:<tag>",
        env=[
            c.V1EnvVar(name=choice.LAUNCHER_ENV, value=choice.KUBERNETES),
            c.V1EnvVar(name=kueue.QUEUE_ENV, value=DOC_QUEUE),
            c.V1EnvVar(
                name="AWS_ACCESS_KEY_ID",
                value_from=c.V1EnvVarSource(
                    secret_key_ref=c.V1SecretKeySelector(
                        name=security.OBJECT_STORE_SECRET, key="AWS_ACCESS_KEY_ID", optional=True
                    )
                ),
            ),
        ],
        resources=c.V1ResourceRequirements(
            requests={"cpu": "4", "memory": "16Gi", "nvidia.com/gpu": "1"},
            limits={"memory": "32Gi", "nvidia.com/gpu": "1"},
        ),
        security_context=c.V1SecurityContext(
            run_as_user=1000, run_as_group=1000, run_as_non_root=True
        ),
        volume_mounts=[
            c.V1VolumeMount(name="imgpipe-tmp", mount_path="/tmp"),
            c.V1VolumeMount(name="data", mount_path="/mnt/imgpipe"),
        ],
    )
    pod = c.V1Pod(
        metadata=c.V1ObjectMeta(
            name="imgpipe-abcde-system-container-impl-123",
            namespace="imgpipe",
            uid="0b5c6a3e-1111-4c4c-9d9d-000000000001",
        ),
        spec=c.V1PodSpec(
            containers=[main],
            node_selector={"nvidia.com/gpu.present": "true"},
            tolerations=[
                c.V1Toleration(key="nvidia.com/gpu", operator="Exists", effect="NoSchedule")
            ],
            volumes=[
                c.V1Volume(name="imgpipe-tmp", empty_dir=c.V1EmptyDirVolumeSource()),
                c.V1Volume(
                    name="data",
                    persistent_volume_claim=c.V1PersistentVolumeClaimVolumeSource(
                        claim_name="imgpipe-data"
                    ),
                ),
            ],
        ),
    )
    return as_served(pod)


def shown_manifests() -> dict[str, str]:
    """The manifests as the docs show them, from doc_pod, 2 workers, queue DOC_QUEUE."""
    pod = doc_pod()
    manifests = {
        "tfjob": kueue.with_queue(tfjob_manifest.manifest(pod, 2, DOC_FOLDER), DOC_QUEUE),
        "jobset": kueue.with_queue(jobset_manifest.manifest(pod, 2, DOC_FOLDER), DOC_QUEUE),
    }
    return {k: yaml.safe_dump(v, sort_keys=False, width=100) for k, v in manifests.items()}


def test_the_docs_show_the_manifests_the_code_makes(schema, tfjob_schema):
    from tests.test_kubeflow_tfjob import check_against_the_crd as check_tfjob

    expected = shown_manifests()
    check_tfjob(yaml.safe_load(expected["tfjob"]), tfjob_schema)
    check_against_the_crd(yaml.safe_load(expected["jobset"]), schema)
    with open(DOC) as f:
        text = f.read()
    if os.environ.get("IMGPIPE_UPDATE_GOLDEN"):
        text = _SHOWN.sub(
            lambda m: f"<!-- manifest: {m.group(1)} -->\n```yaml\n{expected[m.group(1)]}```", text
        )
        with open(DOC, "w") as f:
            f.write(text)
    shown = dict(_SHOWN.findall(text))
    assert shown == expected, (
        "docs/distributed-training.md shows other manifests; IMGPIPE_UPDATE_GOLDEN=1 rewrites them"
    )


# --- the launcher, through the kubernetes client, against a fake API server ---------


@pytest.fixture
def in_step_pod(monkeypatch):
    monkeypatch.setenv(choice.POD_NAME_ENV, POD_NAME)
    monkeypatch.setenv(choice.POD_NAMESPACE_ENV, NAMESPACE)
    monkeypatch.delenv(kueue.QUEUE_ENV, raising=False)


def jobset_server(tmp_path, script, logs=None, status=None) -> FakeApiServer:
    return FakeApiServer(served_step(tmp_path), script, logs or {}, status, kind="jobset")


def test_a_jobset_that_succeeds_streams_the_chiefs_log_keeps_every_log_and_is_deleted(
    in_step_pod, monkeypatch, tmp_path, schema, capfd
):
    monkeypatch.setenv(kueue.QUEUE_ENV, "gpu-a100")

    def script(polls):
        if polls < 2:
            return [], None  # Kueue holds it (created suspended: it names a queue)
        if polls < 4:
            return [("Pending", None), ("Pending", None)], None, False  # admitted
        if polls < 6:
            return [("Running", None), ("Running", None)], None
        return [("Succeeded", 0), ("Succeeded", 0)], "Completed"

    server = jobset_server(tmp_path, script, {0: "epoch 1/3\nchief done\n", 1: "worker 1 done\n"})
    try:
        folder = run_launcher(server, tmp_path)
    finally:
        server.close()
    (name,) = server.jobs
    body = server.jobs[name]
    check_against_the_crd(body, schema)
    assert body["kind"] == "JobSet"
    assert body["metadata"]["labels"][kueue.QUEUE_LABEL] == "gpu-a100"
    (container,) = job_template(body)["spec"]["template"]["spec"]["containers"]
    assert container["command"][-1] == folder
    assert kueue.QUEUE_ENV not in env_of(container)
    assert server.deleted == [name]
    err = capfd.readouterr().err
    assert "chief done" in err
    assert f"Trainer: JobSet {NAMESPACE}/{name} of 2 workers" in err
    assert f"Trainer: JobSet {NAMESPACE}/{name} is queued in gpu-a100 (Kueue) for 0 s" in err
    assert f"Trainer: JobSet {NAMESPACE}/{name} was admitted after 0 s" in err
    logs = tmp_path / "model_run" / "workers"
    assert (logs / "worker-0.log").read_text() == "epoch 1/3\nchief done\n"
    assert (logs / "worker-1.log").read_text() == "worker 1 done\n"
    assert ("jobset.x-k8s.io", "jobsets", "create") in server.calls
    assert_calls_are_granted(server.calls)


def test_a_failed_worker_is_named_in_one_line_and_the_jobset_is_deleted(in_step_pod, tmp_path):
    def script(polls):
        if polls < 3:
            return [("Running", None), ("Running", None)], None
        return [("Running", None), ("Failed", 137)], None

    log = "epoch 1/3\nimgpipe-worker-error: ResourceExhaustedError: OOM when allocating\n"
    server = jobset_server(tmp_path, script, {0: "epoch 1/3\n", 1: log})
    try:
        with pytest.raises(replicas.WorkersFailed) as e:
            run_launcher(server, tmp_path)
    finally:
        server.close()
    (name,) = server.jobs
    message = str(e.value)
    assert "\n" not in message
    assert message.startswith(
        f"trainer worker 1 of 2 (pod {NAMESPACE}/{name}-worker-0-1-00000) exited with code 137 "
        "(OOMKilled): ResourceExhaustedError: OOM when allocating; the JobSet was deleted"
    ), message
    assert "nothing was exported" in message
    assert server.deleted == [name]
    assert (tmp_path / "model_run" / "workers" / "worker-1.log").read_text() == log
    assert_calls_are_granted(server.calls)


@pytest.mark.parametrize(
    "condition,expected",
    [
        ("Failed", r"failed: JobSet imgpipe-train-\w+ is Failed; nothing was exported"),
        ("terminalState=Failed", r"failed: its terminal state is Failed; nothing was exported"),
    ],
)
def test_a_jobset_that_failed_is_reported_with_its_message(
    in_step_pod, tmp_path, condition, expected
):
    server = jobset_server(tmp_path, lambda polls: ([], condition))
    try:
        with pytest.raises(
            replicas.WorkersFailed, match=rf"^JobSet imgpipe/imgpipe-train-\w+ {expected}"
        ):
            run_launcher(server, tmp_path)
    finally:
        server.close()
    assert len(server.deleted) == 1


def test_a_jobset_whose_terminal_state_is_completed_has_succeeded(in_step_pod, tmp_path):
    def script(polls):
        if polls < 3:
            return [("Running", None), ("Running", None)], None
        return [("Succeeded", 0), ("Succeeded", 0)], "terminalState=Completed"

    server = jobset_server(tmp_path, script, {0: "chief done\n"})
    try:
        run_launcher(server, tmp_path)
    finally:
        server.close()
    assert len(server.deleted) == 1


def _unstarted_failure(server: FakeApiServer, tmp_path, start_timeout_s: float) -> str:
    try:
        with pytest.raises(replicas.WorkersFailed) as e:
            run_launcher(server, tmp_path, start_timeout_s=start_timeout_s)
    finally:
        server.close()
    (name,) = server.jobs
    assert server.deleted == [name]
    assert "\n" not in str(e.value) and "the JobSet was deleted" in str(e.value)
    assert "nothing was exported" in str(e.value)
    assert_calls_are_granted(server.calls)
    return str(e.value)


def test_a_worker_that_cannot_be_scheduled_fails_once_the_start_bound_passes(in_step_pod, tmp_path):
    server = jobset_server(tmp_path, lambda polls: ([("Running", None), ("Pending", None)], None))
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
        r"trainer worker 1 of 2 \(pod .*-worker-0-1-00000\) has not started after \d+ s: it "
        r"cannot be scheduled: 0/3 nodes are available: 3 Insufficient nvidia.com/gpu.",
        message,
    ), message
    assert server.polls > 1


def test_a_worker_whose_image_name_is_invalid_fails_at_once(in_step_pod, tmp_path):
    server = jobset_server(tmp_path, lambda polls: ([("Pending", None), ("Pending", None)], None))
    server.pending_status = {
        "containerStatuses": [
            {
                "name": jobset_manifest.CONTAINER,
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


def test_a_jobset_without_pods_names_the_jobset_controller(in_step_pod, tmp_path):
    server = jobset_server(tmp_path, lambda polls: ([], None))
    message = _unstarted_failure(server, tmp_path, start_timeout_s=0.2)
    assert message.startswith("trainer worker 0 of 2 has not started after")
    assert "the JobSet controller has made no pod for it" in message
    assert "kubectl -n jobset-system get deploy jobset-controller-manager" in message


def test_an_api_server_that_fails_a_few_polls_does_not_fail_the_jobset(in_step_pod, tmp_path):
    def script(polls):
        if polls < 8:
            return [("Running", None), ("Running", None)], None
        return [("Succeeded", 0), ("Succeeded", 0)], "Completed"

    server = jobset_server(tmp_path, script, {0: "chief done\n"})
    server.failing_polls = {2, 3, 5}
    try:
        run_launcher(server, tmp_path)
    finally:
        server.close()
    assert server.polls >= 8 and len(server.deleted) == 1


def test_an_api_server_gone_past_the_outage_bound_fails_in_one_line(in_step_pod, tmp_path):
    server = jobset_server(tmp_path, lambda polls: ([("Running", None), ("Running", None)], None))
    server.api_gone_after = 4
    try:
        with pytest.raises(replicas.WorkersFailed) as e:
            run_launcher(server, tmp_path, api_outage_s=0.3)
    finally:
        server.close()
    (name,) = server.jobs
    assert str(e.value) == (
        f"the Kubernetes API has not answered the Trainer about JobSet {NAMESPACE}/{name} for "
        "0 s (503 Service Unavailable); nothing was exported; a rerun resumes from the last "
        "preemption backup"
    )
    # Its deletion is refused too: the step's pod owns it, and Kubernetes deletes it.
    assert server.deleted == []


@pytest.mark.parametrize(
    "refused,status,expected",
    [
        (
            ("jobsets", "create"),
            404,
            r"^cannot create JobSet imgpipe/imgpipe-train-\w+: this cluster has no JobSet "
            r"resource \(jobset.x-k8s.io/v1alpha2\); install JobSet v0.12.0's manifest, or set "
            r"trainer.launcher=tfjob$",
        ),
        (
            ("jobsets", "create"),
            403,
            r"^the Trainer's service account may not create JobSet imgpipe/imgpipe-train-\w+ "
            r"\(create jobsets\): apply k8s/rbac.yaml",
        ),
    ],
)
def test_a_cluster_that_cannot_run_the_jobset_is_one_line_naming_the_fix(
    in_step_pod, tmp_path, refused, status, expected
):
    server = jobset_server(tmp_path, lambda polls: ([], None), status={refused: status})
    try:
        with pytest.raises(kubernetes_replicas.KubernetesUnavailable, match=expected) as e:
            run_launcher(server, tmp_path)
    finally:
        server.close()
    assert "\n" not in str(e.value) and server.deleted == []
