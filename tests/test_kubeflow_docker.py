"""The compiled package as users run it on one machine: `imgpipe kfp compile`, then
`imgpipe kfp run-local`, which runs every step in the project image under kfp.local's
DockerRunner: as the image's user (uid 1000), read-only root, no capabilities, offline.

One folder stands for the cluster's volume (kubeflow.pvc_name): it is the pipeline root
that DockerRunner mounts into every container, and it holds the data spans and the
serving directory, as the claim does on a cluster. Two runs: span 1 is trained and
pushed; span 2 lands, and the second run compares its model with span 1's champion.
The pushed model is then loaded here, in the test's own environment, and classifies
photos that no span holds.

kfp.local may report a failed step as succeeded (its container was removed before its
exit code was read), so run-local judges each step by its outputs; this test also
checks the manifests of the outputs that have one, and who wrote them.
"""

from __future__ import annotations

import glob
import json
import os
import shutil
from typing import NamedTuple

import numpy as np
import pytest
import yaml

from imgpipe.components.common.formats import conversion_summary, layout, manifest, served_models
from imgpipe.components.evaluator import evaluation as ev
from imgpipe.pipelines import cli, sample_photos
from imgpipe.pipelines import component_ids as ids
from imgpipe.pipelines.images import RUNTIME_UID
from imgpipe.pipelines.kubeflow import local_docker
from tests import containers

pytestmark = pytest.mark.container

CLASSES = ("animal", "chessboard")
PER_CLASS = 24
SPAN_2_PER_CLASS = 28
PHOTO_SIZE = 64
# Tiny training, and a gate a tiny model can pass on a dozen eval photos: the steps and
# the champion logic are under test here, not the model.
SETTINGS = {
    "pipeline_name": "docker-test",
    "trainer": {
        "image_size": 32,
        "batch_size": 8,
        "epochs": 2,
        "min_train_steps": 40,
        "warm_start": True,
        "tensorboard_images": 0,
    },
    "example_gen": {"output": {"num_shards": 1, "splits": [["train", 0.75], ["eval", 0.25]]}},
    "evaluator": {"accuracy_threshold": 0.6, "significance": 0.1},
    "statistics": {"fail_on_drift": False},
}


@pytest.fixture(scope="module")
def project_image() -> str:
    """The built image (IMGPIPE_TEST_IMAGE, or the checkout's own tag)."""
    return containers.runtime_image()


# Outputs that end with a manifest (components/common/formats/manifest.py), by task.
WITH_MANIFEST = {
    ids.EXAMPLE_GEN: "examples",
    ids.IMAGE_STATISTICS: "statistics",
    ids.TRAINER: "model",
}


def _photos(folder: str, staging: str, seed: int, per_class: int = PER_CLASS) -> str:
    """The demo's photos, made in `staging` and copied in: new data landing."""
    staged = os.path.join(staging, f"seed-{seed}")
    sample_photos.make_dataset(
        staged, per_class=per_class, size=PHOTO_SIZE, seed=seed, classes=CLASSES
    )
    shutil.copytree(staged, folder)  # the stamp file stays beside the staged copy
    return folder


def _open_to_the_steps_user(folder: str) -> None:
    """What a claim's fsGroup does on a cluster: the steps' user may write the volume."""
    for dirpath, _, _ in os.walk(folder):
        os.chmod(dirpath, 0o777)


def _run(args: list[str], capsys) -> str:
    """Runs the CLI; returns the run's folder, which run-local prints last."""
    code = cli.main(args)
    out, err = capsys.readouterr()
    assert code == 0, err[-3000:]
    last = out.strip().splitlines()[-1]
    assert last.startswith("ran docker-test in containers; artifacts in "), last
    return last.rsplit(" ", 1)[1]


def _executor_outputs(run_dir: str) -> dict[str, dict]:
    paths = glob.glob(os.path.join(run_dir, "*", local_docker.EXECUTOR_OUTPUT_FILE))
    outputs = {}
    for path in paths:
        assert os.stat(path).st_uid == RUNTIME_UID, path  # written by the image's user
        with open(path) as f:
            outputs[os.path.basename(os.path.dirname(path))] = json.load(f)
    return outputs


def _check_steps(spec: dict, run_dir: str) -> dict[str, dict[str, list[str]]]:
    """Every step's output URIs by task; each manifest verified, checksums included."""
    folders = local_docker.task_folders(spec)
    outputs = _executor_outputs(run_dir)
    assert set(outputs) == set(folders.values())
    uris = {
        task: {
            name: [a["uri"] for a in value["artifacts"]]
            for name, value in outputs[folder]["artifacts"].items()
        }
        for task, folder in folders.items()
    }
    for task, output in WITH_MANIFEST.items():
        for uri in uris[task][output]:
            listed = glob.glob(os.path.join(uri, "**", layout.MANIFEST_FILE), recursive=True)
            assert listed, f"{task}: no manifest under {uri}"
            for path in listed:
                manifest.verify(os.path.dirname(path), checksums=True)
    return uris


def _classify(model_dir: str, folder: str) -> float:
    import tensorflow as tf

    images, labels = [], []
    for label in sorted(os.listdir(folder)):
        for name in sorted(os.listdir(os.path.join(folder, label))):
            with open(os.path.join(folder, label, name), "rb") as f:
                images.append(f.read())
            labels.append(label)
    signature = tf.saved_model.load(model_dir).signatures["serving_default"]
    predicted = signature(images=tf.constant(images))["predicted_class"].numpy()
    assert {p.decode() for p in predicted} <= set(CLASSES)
    return float(np.mean([p.decode() == t for p, t in zip(predicted, labels, strict=True)]))


class Project(NamedTuple):
    config: str
    package: str
    data: str  # span-{SPAN} folders
    serving: str


def compiled_project(tmp_path, image: str, settings: dict) -> Project:
    """Span 1 of photos on a volume the steps' user may write, its config naming `image`
    (what users do to run their own build) and its compiled package."""
    volume = str(tmp_path / "volume")
    data, serving = os.path.join(volume, "data"), os.path.join(volume, "serving")
    os.makedirs(data)
    os.makedirs(serving)
    _photos(os.path.join(data, "span-1"), str(tmp_path / "staging"), seed=1)
    _open_to_the_steps_user(volume)
    config = tmp_path / "config.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                **settings,
                "data_root": os.path.join(data, "span-{SPAN}"),
                "pipeline_root": volume,
                "serving_dir": serving,
                "kubeflow": {"images": {"default": image, ids.TRAINER: image}},
            }
        )
    )
    package = str(tmp_path / "pipeline.yaml")
    assert cli.main(["kfp", "compile", "--config", str(config), "-o", package]) == 0
    return Project(str(config), package, data, serving)


def test_the_compiled_package_runs_in_containers_twice_and_serves(
    project_image,
    tmp_path,
    capsys,
):
    config, package, data, serving = compiled_project(tmp_path, project_image, SETTINGS)
    spec = local_docker.load_spec(package)
    run = ["kfp", "run-local", "--config", config, "--package", package, "--network", "none"]

    first_dir = _run(run, capsys)
    first = _check_steps(spec, first_dir)
    (evaluation_uri,) = first[ids.EVALUATOR]["evaluation"]
    evaluation = ev.read(evaluation_uri)
    assert evaluation.champion.status == ev.NO_CHAMPION
    assert evaluation.decision.blessed, evaluation.decision.reason
    champion_1 = served_models.latest(serving)
    assert champion_1 is not None
    assert os.stat(champion_1.path).st_uid == RUNTIME_UID

    _photos(
        os.path.join(data, "span-2"), str(tmp_path / "staging"), 2, SPAN_2_PER_CLASS
    )  # new data
    _open_to_the_steps_user(data)
    second_dir = _run(run, capsys)
    second = _check_steps(spec, second_dir)
    (examples_uri,) = second[ids.EXAMPLE_GEN]["examples"]
    (summary,) = glob.glob(os.path.join(examples_uri, "**", layout.SUMMARY_FILE), recursive=True)
    assert conversion_summary.read(os.path.dirname(summary)).written == 2 * SPAN_2_PER_CLASS
    (evaluation_uri,) = second[ids.EVALUATOR]["evaluation"]
    evaluation = ev.read(evaluation_uri)
    assert evaluation.champion.status == ev.COMPARED, evaluation.champion.note
    assert evaluation.champion.version == champion_1.version
    champion = served_models.latest(serving)
    assert champion is not None
    assert (champion != champion_1) == evaluation.decision.blessed
    assert os.stat(champion.path).st_uid == RUNTIME_UID  # pushed from a container

    held_back = _photos(str(tmp_path / "held-back"), str(tmp_path / "staging"), 3, 8)
    assert _classify(champion.path, held_back) >= 0.75


def test_a_failing_step_is_one_error_with_the_end_of_its_log(project_image, tmp_path, capsys):
    volume = str(tmp_path / "volume")
    os.makedirs(os.path.join(volume, "data"))  # no span has landed
    _open_to_the_steps_user(volume)
    config = tmp_path / "config.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                **SETTINGS,
                "data_root": os.path.join(volume, "data", "span-{SPAN}"),
                "pipeline_root": volume,
                "serving_dir": os.path.join(volume, "serving"),
                "kubeflow": {"images": {"default": project_image, ids.TRAINER: project_image}},
            }
        )
    )
    code = cli.main(["kfp", "run-local", "--config", str(config), "--network", "none"])
    err = capsys.readouterr().err.strip()
    assert code == 1 and len(err.splitlines()) == 1
    assert err.startswith("imgpipe: error: step ImageExampleGen failed: it wrote nothing; ")
    # The step's own last words, from inside its container.
    tail = err.split("the end of its log: ", 1)[1]
    assert "span-{SPAN}" in tail and "Error" in tail
    serving = os.path.join(volume, "serving")
    assert not os.path.exists(serving) or not os.listdir(serving)
