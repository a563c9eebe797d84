"""The k8s/ manifests parse, validate against the kubernetes client's models (unknown
fields included), and agree with the pipeline config they are examples of."""

from __future__ import annotations

import os
import re

import kubernetes
import pytest
import yaml

from imgpipe.components.trainer.several_workers import kubernetes_jobs
from imgpipe.pipelines import config as cfg
from imgpipe.pipelines import images
from imgpipe.pipelines.kubeflow.config import GpuConfig, KubeflowConfig
from tests import waiting

pytestmark = pytest.mark.unit

K8S_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "k8s")
PIPELINE_CONFIG = os.path.join(K8S_DIR, "pipeline-config.yaml")
MANIFEST_FILES = sorted(
    os.path.join(K8S_DIR, name)
    for name in os.listdir(K8S_DIR)
    if name.endswith(".yaml") and os.path.join(K8S_DIR, name) != PIPELINE_CONFIG
)


ROOT = os.path.dirname(K8S_DIR)
K8S_IMAGES = os.path.join(ROOT, "bin", "k8s-images")
STALE = (
    "k8s/ names another build than this checkout's (a file of pipelines/images.py's "
    "IMAGE_INPUTS changed): run `make k8s-images` and commit k8s/ with the change"
)


def assert_names_the_image(reference: str, variant: str) -> None:
    """The project's image of that variant, by this checkout's content tag, the one `imgpipe
    kfp compile` names (`make k8s-images` writes it)."""
    expected = {"cpu": images.RUNTIME_IMAGE, "gpu": images.GPU_IMAGE}[variant]
    assert reference == expected, f"{reference} is not {expected}: {STALE}"


def test_the_manifests_name_the_build_kfp_compile_names():
    """`bin/k8s-images --check`, as the docs tell a user to run it, on the committed k8s/."""
    import subprocess
    import sys

    check = subprocess.run(
        [sys.executable, K8S_IMAGES, "--check"],
        capture_output=True,
        text=True,
        timeout=waiting.COMMAND_S,
    )
    assert check.returncode == 0, f"{check.stdout}{check.stderr}{STALE}"


def test_the_manifests_name_one_build_and_make_k8s_images_names_this_checkouts(tmp_path):
    import shutil
    import subprocess
    import sys

    marked = re.compile(r"image: (\S+)\s+# imgpipe-image: (cpu|gpu)$")
    found = [m.groups() for path in MANIFEST_FILES for m in map(marked.search, open(path)) if m]
    assert sorted(variant for _, variant in found) == ["cpu", "gpu"]
    for reference, variant in found:
        assert_names_the_image(reference, variant)
    assert len({reference.removesuffix("-gpu") for reference, _ in found}) == 1
    # Every image of the project's repository is marked, so the script finds it.
    for path in MANIFEST_FILES:
        for line in open(path):
            if f"{images.REGISTRY}/{images.IMAGE_NAME}" in line:
                assert marked.search(line.rstrip()), f"{path}: {line}"

    for path in MANIFEST_FILES:
        shutil.copy(path, tmp_path)
    script = K8S_IMAGES
    subprocess.run([sys.executable, script, str(tmp_path)], check=True, capture_output=True)
    rewritten = [
        m.groups() for p in tmp_path.glob("*.yaml") for m in map(marked.search, open(p)) if m
    ]
    assert sorted(rewritten) == sorted([(images.RUNTIME_IMAGE, "cpu"), (images.GPU_IMAGE, "gpu")])
    check = [sys.executable, script, "--check", str(tmp_path)]
    assert subprocess.run(check, capture_output=True).returncode == 0
    digest = "registry.example/imgpipe@sha256:" + "c" * 64
    subprocess.run([sys.executable, script, "--cpu", digest, str(tmp_path)], check=True)
    assert digest in (tmp_path / "flink-deployment.yaml").read_text()
    assert subprocess.run(check, capture_output=True).returncode == 1


_LIST = re.compile(r"^list\[(.+)\]$")
_DICT = re.compile(r"^dict\(([^,]+), (.+)\)$")
_PRIMITIVES = {"str": str, "int": int, "bool": bool, "float": (int, float), "object": object}


def strict_errors(data, type_name: str, where: str) -> list[str]:
    """Fields the kubernetes client's model `type_name` does not know, recursively."""
    if match := _LIST.match(type_name):
        if not isinstance(data, list):
            return [f"{where}: expected a list, got {data!r}"]
        return [
            e
            for i, item in enumerate(data)
            for e in strict_errors(item, match.group(1), f"{where}[{i}]")
        ]
    if match := _DICT.match(type_name):
        if not isinstance(data, dict):
            return [f"{where}: expected a mapping, got {data!r}"]
        return [
            e for k, v in data.items() for e in strict_errors(v, match.group(2), f"{where}.{k}")
        ]
    if type_name in _PRIMITIVES:
        ok = isinstance(data, _PRIMITIVES[type_name]) and not (
            type_name == "int" and isinstance(data, bool)
        )
        return [] if ok else [f"{where}: expected {type_name}, got {data!r}"]
    model = getattr(kubernetes.client, type_name)
    if not isinstance(data, dict):
        return [f"{where}: expected a {type_name} mapping, got {data!r}"]
    by_json = {json_name: attr for attr, json_name in model.attribute_map.items()}
    errors = []
    for key, value in data.items():
        if key not in by_json:
            errors.append(f"{where}.{key}: not a field of {type_name}")
        else:
            errors += strict_errors(value, model.openapi_types[by_json[key]], f"{where}.{key}")
    return errors


def model_name(document: dict) -> str:
    version = document["apiVersion"].split("/")[-1]
    return version.capitalize() + document["kind"]


def load_documents() -> list[tuple[str, dict]]:
    documents = []
    for path in MANIFEST_FILES:
        with open(path) as f:
            documents += [(os.path.basename(path), d) for d in yaml.safe_load_all(f) if d]
    return documents


# Kinds of custom resources, which the kubernetes client has no model of; their pod
# templates are checked against its Pod model instead.
CUSTOM_KINDS = ("FlinkDeployment",)
ALL_DOCUMENTS = load_documents()
DOCUMENTS = [(n, d) for n, d in ALL_DOCUMENTS if d["kind"] not in CUSTOM_KINDS]


def test_the_manifests_cover_the_deployment():
    kinds = {d["kind"] for _, d in DOCUMENTS}
    assert {
        "Namespace",
        "PersistentVolumeClaim",
        "ConfigMap",
        "ServiceAccount",
        "Role",
        "RoleBinding",
        "Pod",
    } <= kinds
    assert os.path.isfile(os.path.join(K8S_DIR, "README.md"))


@pytest.mark.parametrize("name,document", DOCUMENTS, ids=[f"{n}:{d['kind']}" for n, d in DOCUMENTS])
def test_manifest_validates_against_the_kubernetes_models(name, document):
    type_name = model_name(document)
    assert hasattr(kubernetes.client, type_name), f"{name}: no model {type_name}"
    assert strict_errors(document, type_name, name) == []
    # The client's own deserializer enforces required fields and enum values.
    api = kubernetes.client.ApiClient()
    obj = api._ApiClient__deserialize(document, type_name)
    assert obj.metadata.name
    if document["kind"] != "Namespace":
        assert obj.metadata.namespace == "imgpipe"


def test_strict_validation_catches_a_misspelt_field():
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "x"},
        "spec": {"containers": [{"name": "c", "image": "i", "resource": {}}]},
    }
    assert strict_errors(pod, "V1Pod", "pod") == [
        "pod.spec.containers[0].resource: not a field of V1Container"
    ]


def test_the_service_account_is_least_privilege_and_is_the_configs():
    by_kind = {d["kind"]: d for _, d in DOCUMENTS}
    account = by_kind["ServiceAccount"]["metadata"]["name"]
    assert account == KubeflowConfig().service_account
    binding = by_kind["RoleBinding"]
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": account, "namespace": "imgpipe"}
    ]
    assert binding["roleRef"]["kind"] == "Role"  # namespaced, never a ClusterRole
    named = [rule for rule in by_kind["Role"]["rules"] if rule.get("resourceNames")]
    for rule in named:
        assert set(rule["verbs"]) == {"get"}
    # The rest is what the Trainer of trainer.workers > 1 calls for its TFJob or its
    # JobSet, exactly (tests/test_kubeflow_tfjob.py holds the calls to it).
    others = [rule for rule in by_kind["Role"]["rules"] if not rule.get("resourceNames")]
    assert {
        (group, resource): frozenset(rule["verbs"])
        for rule in others
        for group in rule["apiGroups"]
        for resource in rule["resources"]
    } == kubernetes_jobs.API_RULES


def test_the_gpu_example_matches_what_the_compiler_writes():
    pod = next(d for _, d in DOCUMENTS if d["kind"] == "Pod")
    gpu = GpuConfig()
    assert pod["spec"]["nodeSelector"] == dict(gpu.node_selector)
    assert pod["spec"]["tolerations"] == [
        {"key": t.key, "operator": t.operator, "effect": t.effect} for t in gpu.tolerations
    ]
    (container,) = pod["spec"]["containers"]
    assert_names_the_image(container["image"], "gpu")  # TensorFlow's CUDA libraries
    assert container["resources"]["limits"] == {gpu.accelerator: "1"}


def test_the_example_pipeline_config_loads_and_uses_the_claim():
    config = cfg.load(PIPELINE_CONFIG)
    claim = next(d for _, d in DOCUMENTS if d["kind"] == "PersistentVolumeClaim")
    assert config.kubeflow.pvc_name == claim["metadata"]["name"]
    assert config.data_root.startswith(config.kubeflow.mount_path)
    assert config.trainer.num_gpus == 1


def test_the_namespace_enforces_the_restricted_pod_security_standard():
    namespace = next(d for _, d in DOCUMENTS if d["kind"] == "Namespace")
    labels = namespace["metadata"]["labels"]
    for mode in ("enforce", "warn", "audit"):
        assert labels[f"pod-security.kubernetes.io/{mode}"] == "restricted"


def test_every_pod_meets_the_restricted_standard_as_the_compiled_steps_user():
    """The fields the restricted standard checks, and the user the compiler names."""
    from imgpipe.pipelines.kubeflow.compiler import security_context

    pods = [d for _, d in DOCUMENTS if d["kind"] == "Pod"]
    pods += [d["spec"]["template"] for _, d in DOCUMENTS if d["kind"] == "Deployment"]
    assert len(pods) >= 2
    for pod in pods:
        pod_context = pod["spec"]["securityContext"]
        assert pod_context["seccompProfile"] == {"type": "RuntimeDefault"}
        assert {k: pod_context[k] for k in security_context()} == security_context()
        for container in pod["spec"]["containers"]:
            context = container["securityContext"]
            assert context["allowPrivilegeEscalation"] is False
            assert context["capabilities"] == {"drop": ["ALL"]}


# The fields of the Flink Kubernetes operator's FlinkDeployment (v1beta1) that a session
# cluster uses, from its CRD; a field outside them is a typo the operator would reject.
_FLINK_SPEC_FIELDS = {
    "image",
    "imagePullPolicy",
    "flinkVersion",
    "serviceAccount",
    "flinkConfiguration",
    "podTemplate",
    "jobManager",
    "taskManager",
    "job",
    "mode",
    "ingress",
    "logConfiguration",
    "restartNonce",
}
_FLINK_ROLE_FIELDS = {"resource", "replicas", "podTemplate"}
_FLINK_RESOURCE_FIELDS = {"cpu", "memory", "ephemeralStorage"}


def _flink_deployment() -> dict:
    (document,) = [d for _, d in ALL_DOCUMENTS if d["kind"] == "FlinkDeployment"]
    return document


def test_the_flink_deployment_uses_known_fields_and_pod_templates_that_validate():
    document = _flink_deployment()
    assert document["apiVersion"] == "flink.apache.org/v1beta1"
    assert document["metadata"]["namespace"] == "imgpipe"
    spec = document["spec"]
    assert set(spec) <= _FLINK_SPEC_FIELDS
    templates = [spec["podTemplate"]]
    for role in ("jobManager", "taskManager"):
        assert set(spec[role]) <= _FLINK_ROLE_FIELDS, role
        assert set(spec[role]["resource"]) <= _FLINK_RESOURCE_FIELDS, role
        templates += [spec[role]["podTemplate"]] if "podTemplate" in spec[role] else []
    for template in templates:
        assert strict_errors(template, "V1Pod", "podTemplate") == []
        pod = kubernetes.client.ApiClient()._ApiClient__deserialize(template, "V1Pod")
        assert pod.spec.security_context.run_as_non_root is True
        assert pod.spec.security_context.seccomp_profile.type == "RuntimeDefault"
        for container in pod.spec.containers:
            context = container.security_context
            assert context.allow_privilege_escalation is False
            assert context.capabilities.drop == ["ALL"]
            assert context.run_as_user


def test_the_flink_deployment_matches_the_local_cluster_and_runs_the_worker_pool_sidecar():
    from imgpipe.pipelines.engines import flink
    from tests import flink_image

    spec = _flink_deployment()["spec"]
    assert spec["image"].startswith(f"flink:{flink.FLINK_VERSION}-")
    assert spec["flinkVersion"] == "v" + flink.FLINK_MINOR.replace(".", "_")
    assert spec["flinkConfiguration"]["taskmanager.numberOfTaskSlots"] == str(flink.SLOTS)
    # The restart strategy with which the container tier survives a lost TaskManager.
    for key, value in flink_image.RESTART_STRATEGY.items():
        assert spec["flinkConfiguration"][key] == str(value), key
    containers = spec["taskManager"]["podTemplate"]["spec"]["containers"]
    (pool,) = [c for c in containers if c["name"] == "beam-worker-pool"]
    assert_names_the_image(pool["image"], "cpu")
    assert pool["command"][-1] == "apache_beam.runners.worker.worker_pool_main"
    assert pool["args"] == [f"--service_port={flink.WORKER_POOL_PORT}"]
    assert pool["securityContext"]["runAsUser"] == images.RUNTIME_UID


def _job_server() -> tuple[dict, dict]:
    """The job server's Deployment and its Service."""
    (deployment,) = [d for _, d in DOCUMENTS if d["kind"] == "Deployment"]
    (service,) = [d for _, d in DOCUMENTS if d["kind"] == "Service"]
    return deployment, service


def test_the_job_server_is_the_local_clusters_and_reaches_the_flink_deployment():
    from imgpipe.pipelines.engines import flink

    deployment, service = _job_server()
    pod = deployment["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    image, tag = container["image"].rsplit(":", 1)
    assert image == f"apache/beam_flink{flink.FLINK_MINOR}_job_server"
    assert tag == flink.BEAM_RUNNER_VERSION
    args = dict(arg.removeprefix("--").split("=", 1) for arg in container["args"])
    # The operator names the JobManager's REST service <name>-rest, on Flink's port 8081.
    assert args["flink-master"] == f"{_flink_deployment()['metadata']['name']}-rest:8081"
    assert service["metadata"]["namespace"] == deployment["metadata"]["namespace"] == "imgpipe"
    assert service["spec"]["selector"].items() <= pod_labels(deployment).items()
    ports = {port["name"]: port["containerPort"] for port in container["ports"]}
    assert ports == {"job": int(args["job-port"]), "artifact": int(args["artifact-port"])}
    assert {port["port"] for port in service["spec"]["ports"]} == set(ports.values())


def test_the_taskmanagers_read_the_artifacts_the_job_server_stages():
    deployment, _ = _job_server()
    pod = deployment["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    args = dict(arg.removeprefix("--").split("=", 1) for arg in container["args"])
    staged = args["artifacts-dir"]

    def claim_mounts(pod_spec: dict, container: dict) -> dict[str, str]:
        claims = {
            v["name"]: v["persistentVolumeClaim"]["claimName"]
            for v in pod_spec.get("volumes", [])
            if "persistentVolumeClaim" in v
        }
        return {
            m["mountPath"]: claims[m["name"]]
            for m in container.get("volumeMounts", [])
            if m["name"] in claims
        }

    def claim_of(mounts: dict[str, str]) -> str | None:
        for path, claim in mounts.items():
            if staged == path or staged.startswith(path.rstrip("/") + "/"):
                return claim
        return None

    job_server_claim = claim_of(claim_mounts(pod, container))
    assert job_server_claim is not None
    taskmanager = _flink_deployment()["spec"]["taskManager"]["podTemplate"]["spec"]
    (flink_container,) = [
        c for c in taskmanager["containers"] if c["name"] == "flink-main-container"
    ]
    assert claim_of(claim_mounts(taskmanager, flink_container)) == job_server_claim


def test_the_flink_deployment_has_the_local_clusters_taskmanager_memory():
    from imgpipe.pipelines.engines import flink

    spec = _flink_deployment()["spec"]
    assert spec["taskManager"]["resource"]["memory"] == flink.TASKMANAGER_PROCESS_SIZE
    configured = {
        key: value
        for key, value in spec["flinkConfiguration"].items()
        if key.startswith("taskmanager.memory.")
    }
    assert configured == flink.TASKMANAGER_MEMORY


def pod_labels(deployment: dict) -> dict:
    return deployment["spec"]["template"]["metadata"]["labels"]


# ---- every pod: a read-only root, a token only where the API server is called, images
# ---- pinned or pinnable ---------------------------------------------------------------


def pod_specs() -> list[tuple[str, dict]]:
    """Every pod spec in k8s/, named `file[:role]`; the FlinkDeployment's top-level
    template is the JobManager's (it has none of its own)."""
    pods = []
    for name, document in ALL_DOCUMENTS:
        if document["kind"] == "Pod":
            pods.append((name, document["spec"]))
        elif document["kind"] == "Deployment":
            pods.append((name, document["spec"]["template"]["spec"]))
        elif document["kind"] == "FlinkDeployment":
            assert "podTemplate" not in document["spec"]["jobManager"]
            pods.append((f"{name}:jobManager", document["spec"]["podTemplate"]["spec"]))
            template = document["spec"]["taskManager"]["podTemplate"]
            pods.append((f"{name}:taskManager", template["spec"]))
    return pods


# The pods that call the Kubernetes API server, and why; every other pod gets no token.
API_CLIENTS = {
    # Flink's native Kubernetes mode: the JobManager creates and deletes the TaskManager
    # pods, as the operator's `flink` service account.
    "flink-deployment.yaml:jobManager",
}


def test_only_a_pod_that_calls_the_api_server_mounts_a_service_account_token():
    pods = dict(pod_specs())
    assert set(pods) == {
        "flink-deployment.yaml:jobManager",
        "flink-deployment.yaml:taskManager",
        "flink-job-server.yaml",
        "gpu-node-pool.yaml",
    }
    for name, pod in pods.items():
        # Said in every pod, never left to Kubernetes' default (mounted).
        assert pod.get("automountServiceAccountToken") is (name in API_CLIENTS), name


# Where each image's processes write, besides the volumes a pod mounts for its data.
WRITABLE_PATHS = {
    "flink": {"/tmp", "/opt/flink/log"},  # io.tmp.dirs and the blob store; the logs
    "apache/beam_flink1.19_job_server": {"/tmp"},  # the JVM's temporary files
    f"{images.REGISTRY}/{images.IMAGE_NAME}": {"/tmp"},  # security.WRITABLE_TMP
}


def _image_name(reference: str) -> str:
    return reference.split("@")[0].rsplit(":", 1)[0]


def test_every_container_has_a_read_only_root_and_emptydirs_where_it_writes():
    flink_image = _flink_deployment()["spec"]["image"]
    checked = set()
    for name, pod in pod_specs():
        volumes = {v["name"]: v for v in pod.get("volumes", [])}
        for container in pod["containers"]:
            where = f"{name}:{container['name']}"
            assert container["securityContext"].get("readOnlyRootFilesystem") is True, where
            # Flink's own container takes its image from the FlinkDeployment.
            image = _image_name(container.get("image", flink_image))
            mounts = {m["mountPath"]: m["name"] for m in container.get("volumeMounts", [])}
            for path in WRITABLE_PATHS[image]:
                assert path in mounts, f"{where}: nothing writable on {path}"
                assert volumes[mounts[path]] == {"name": mounts[path], "emptyDir": {}}, where
            checked.add(image)
    assert checked == set(WRITABLE_PATHS)


def test_the_taskmanager_template_merges_with_the_common_one_by_position():
    """The operator merges the role's template into the top-level one list by list, item
    by item (unless merge-arrays-by-name is set): the common entries come first, in the
    same order, so that no item merges into a different one (a volume with two sources)."""
    spec = _flink_deployment()["spec"]
    common, taskmanager = spec["podTemplate"]["spec"], spec["taskManager"]["podTemplate"]["spec"]
    (flink,) = common["containers"]
    assert taskmanager["containers"][0]["name"] == flink["name"] == "flink-main-container"
    pairs = [
        (common["volumes"], taskmanager["volumes"]),
        (flink["volumeMounts"], taskmanager["containers"][0]["volumeMounts"]),
    ]
    for shared, own in pairs:
        assert own[: len(shared)] == shared
    assert taskmanager["containers"][0]["securityContext"] == flink["securityContext"]


def _third_party_image_lines() -> list[tuple[str, str]]:
    lines = []
    for path in MANIFEST_FILES:
        for line in open(path):
            if re.match(r"\s*(- )?image:\s", line) and "# imgpipe-image:" not in line:
                lines.append((os.path.basename(path), line.rstrip("\n")))
    return lines


def _pin_base_images():
    import importlib.machinery
    import importlib.util

    path = os.path.join(ROOT, "bin", "pin-base-images")
    loader = importlib.machinery.SourceFileLoader("pin_base_images", path)
    spec = importlib.util.spec_from_loader("pin_base_images", loader)
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


def test_third_party_images_name_a_version_and_make_pin_images_pins_them(tmp_path):
    """No registry is reachable here, so Flink's and the job server's images are named by
    their release tags; `make pin-images` adds the digests where a registry answers."""
    import subprocess
    import threading
    from http.server import BaseHTTPRequestHandler, HTTPServer

    pin = _pin_base_images()
    found = _third_party_image_lines()
    assert {name for name, _ in found} == {"flink-deployment.yaml", "flink-job-server.yaml"}
    for name, line in found:
        match = pin.IMAGE_LINE.match(line)
        assert match, f"{name}: make pin-images would not pin {line.strip()}"
        assert match["tag"] != "latest" and re.match(r"\d", match["tag"]), line

    digest = "sha256:" + "d" * 64

    class Registry(BaseHTTPRequestHandler):
        """Every tag of every repository names `digest`, anonymously."""

        def do_HEAD(self):  # noqa: N802
            assert self.path.startswith("/v2/") and "/manifests/" in self.path
            self.send_response(200)
            self.send_header("Docker-Content-Digest", digest)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args):
            pass

    every_yaml = [*MANIFEST_FILES, PIPELINE_CONFIG]  # as the Makefile's k8s/*.yaml
    for path in every_yaml:
        (tmp_path / os.path.basename(path)).write_text(open(path).read())
    server = HTTPServer(("127.0.0.1", 0), Registry)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    env = {**os.environ, "IMGPIPE_REGISTRY_URL": f"http://127.0.0.1:{server.server_port}"}
    files = sorted(str(p) for p in tmp_path.glob("*.yaml"))
    script = os.path.join(ROOT, "bin", "pin-base-images")
    try:
        pinned = subprocess.run(
            [script, *files], env=env, capture_output=True, timeout=waiting.COMMAND_S
        )
        check = subprocess.run(
            [script, "--check", *files], env=env, capture_output=True, timeout=waiting.COMMAND_S
        )
    finally:
        server.shutdown()
    assert pinned.returncode == 0, pinned.stderr
    assert check.returncode == 0, check.stdout
    for name, line in found:
        match = pin.IMAGE_LINE.match(line)
        expected = f"{match['head']}{match['image']}:{match['tag']}@{digest}{match['tail']}"
        assert expected in (tmp_path / name).read_text().splitlines()
    # Nothing else moved: the project's images stay bin/k8s-images', the config's
    # `image:` mapping stays a mapping.
    for path in every_yaml:
        old = open(path).read().splitlines()
        new = (tmp_path / os.path.basename(path)).read_text().splitlines()
        assert [o for o, n in zip(old, new, strict=True) if o != n] == [
            line for name, line in found if name == os.path.basename(path)
        ]
