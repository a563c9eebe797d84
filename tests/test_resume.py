"""Resuming a preempted Trainer: the backups' fingerprint, publication and checks
(resume.py), and a real Trainer killed mid-epoch then retried into new output folders."""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import shutil
import signal
import subprocess
import sys
import time

import keras
import numpy as np
import pytest
import tensorflow as tf
from tfx.components.trainer.fn_args_utils import FnArgs

from imgpipe.components.common.formats import layout, manifest
from imgpipe.components.common.storage import fileio
from imgpipe.components.trainer import backbones, export, resume, summary, task, training
from imgpipe.components.trainer.config import TrainerConfig
from tests import object_stores, waiting
from tests import trainer_helpers as th

SIZE = 32
STEPS_PER_EPOCH = 40
EPOCHS = 2
BACKUP_EVERY = 10
# The kill comes once a backup within the second epoch exists.
KILL_AFTER_STEPS = STEPS_PER_EPOCH + BACKUP_EVERY
MIN_ACCURACY = 0.9
MAX_ACCURACY_GAP = 0.1
PLAN = resume.Plan(4, 16, (resume.PlannedPhase("head", 1), resume.PlannedPhase("full", 2)))


# --- resume.py on local files -------------------------------------------------------


def _state(phase: int = 1, steps: int = 6, fingerprint: str = "f" * 16) -> resume.BackupState:
    progress = tuple(resume.PhaseProgress(1, 4, 0.5) for _ in range(phase)) + (
        resume.PhaseProgress(steps // 4, steps, None),
    )
    return resume.BackupState(fingerprint, PLAN, phase, steps, progress)


def _publish(folder: str, tmp_path, state: resume.BackupState) -> str:
    weights = tmp_path / "local" / resume.WEIGHTS_FILE
    weights.parent.mkdir(exist_ok=True)
    weights.write_bytes(os.urandom(2000))
    return resume.publish(folder, state, {resume.WEIGHTS_FILE: str(weights)})


@pytest.mark.unit
def test_a_published_backup_is_found_whole_and_replaces_the_older_ones(tmp_path):
    folder = str(tmp_path / "backups" / ("f" * 16))
    first = _publish(folder, tmp_path, _state(0, 4))
    second = _publish(folder, tmp_path, _state(1, 6))
    # A later backup that a kill interrupted: no manifest, so it is passed over.
    os.makedirs(os.path.join(folder, resume.backup_name(1, 7)))

    found = resume.find(folder, "f" * 16, PLAN)

    assert not os.path.exists(first)
    assert found.path == second and found.state == _state(1, 6)
    assert found.state.position == (2, 2)  # 1 head epoch + 1 full epoch, 2 steps in
    resumption = found.resumption()
    assert (resumption.status, resumption.phase, resumption.epoch, resumption.step) == (
        summary.RESUMED,
        "full",
        2,
        2,
    )
    assert sorted(os.listdir(second)) == ["manifest.json", "model.weights.h5", "state.json"]


@pytest.mark.unit
@pytest.mark.parametrize(
    "damage, why",
    [
        ("truncate", "has 1000 bytes, but"),
        ("fingerprint", "it was taken for fingerprint 0000000000000000"),
        ("plan", "it was taken with another schedule"),
        ("extra", "is not in"),
    ],
)
def test_a_backup_that_fails_a_check_means_a_fresh_start(tmp_path, damage, why):
    folder = str(tmp_path / ("f" * 16))
    path = _publish(
        folder, tmp_path, _state(fingerprint="0" * 16 if damage == "fingerprint" else "f" * 16)
    )
    weights = os.path.join(path, resume.WEIGHTS_FILE)
    if damage == "truncate":
        with open(weights, "r+b") as f:
            f.truncate(1000)
    elif damage == "extra":
        open(os.path.join(path, "stray"), "w").close()
    plan = dataclasses.replace(PLAN, global_batch=32) if damage == "plan" else PLAN

    found = resume.find(folder, "f" * 16, plan)

    assert found.state is None and found.path == path
    assert why in found.note and found.note.endswith("training starts afresh")
    assert found.resumption().status == summary.FRESH


@pytest.mark.platform
@pytest.mark.parametrize("server", [object_stores.s3_server, object_stores.gcs_server])
def test_backups_on_an_object_store(tmp_path, server):
    with server() as store:
        folder = store.uri("pipeline-root", "Trainer", resume.BACKUPS_DIR, "f" * 16)
        _publish(folder, tmp_path, _state(0, 4))
        newest = _publish(folder, tmp_path, _state(1, 6))
        assert fileio.list_dir(folder) == [resume.backup_name(1, 6)]
        found = resume.find(folder, "f" * 16, PLAN)
        assert found.path == newest and found.state == _state(1, 6)
        fileio.write_atomic(f"{newest}/{resume.WEIGHTS_FILE}", b"torn")
        assert "fails its check" in resume.find(folder, "f" * 16, PLAN).note
        resume.remove(folder)
        assert not fileio.exists(store.uri("pipeline-root", "Trainer", resume.BACKUPS_DIR))


@pytest.mark.unit
def test_no_backup_and_the_backups_place(tmp_path):
    found = resume.find(str(tmp_path / "none"), "f" * 16, PLAN)
    assert (found.state, found.path) == (None, None) and "no backup in" in found.note
    run = "gs://b/root/Trainer/model_run/7"
    assert resume.backups_root(run, None) == "gs://b/root/Trainer/.backups"
    assert resume.backups_root(run, "gs://b/keep/") == "gs://b/keep"
    assert resume.backups_root("/s3/b/r/run/Trainer/model_run", None) == "s3://b/r/run/.backups"
    assert resume.segments(0, 40, 0, 3) == [resume.Segment(0, 3, 40)]
    assert resume.segments(40, 40, 1, 2) == [resume.Segment(2, 3, 40)]
    assert resume.segments(50, 40, 1, 3) == [resume.Segment(2, 3, 30), resume.Segment(3, 4, 40)]
    assert resume.segments(70, 40, 0, 2) == [resume.Segment(1, 2, 10)]
    assert resume.segments(80, 40, 0, 2) == []
    assert resume.data_seed(3, None) == 3
    assert resume.data_seed(3, _state()) not in (3, resume.data_seed(3, _state(1, 7)))


@pytest.mark.unit
def test_the_run_summary_says_where_training_resumed(tmp_path):
    from imgpipe.pipelines import run_summary

    found = resume.find(str(tmp_path / "none"), "f" * 16, PLAN)
    trained = summary.TrainingSummary("tiny_cnn", 32, None, "off", "", 4, ())
    summary.write(str(tmp_path / "fresh"), dataclasses.replace(trained, resume=found.resumption()))
    assert not [
        line for line in run_summary.training_lines(str(tmp_path / "fresh")) if "preemption" in line
    ]
    folder = str(tmp_path / "backups")
    _publish(folder, tmp_path, _state())
    resumed = resume.find(folder, "f" * 16, PLAN).resumption()
    summary.write(str(tmp_path / "resumed"), dataclasses.replace(trained, resume=resumed))
    lines = run_summary.training_lines(str(tmp_path / "resumed"))
    assert lines[-1].startswith("preemption           resumed from ")
    assert lines[-1].endswith("phase full, epoch 2 step 2, optimizer step 6")


@pytest.mark.unit
def test_the_fingerprint_follows_content_and_settings_not_places(tmp_path):
    def artifact(name: str, data: bytes) -> str:
        folder = tmp_path / name
        folder.mkdir()
        (folder / "data").write_bytes(data)
        manifest.write(str(folder), manifest.describe(str(folder), ["data"]))
        return str(folder)

    examples, copy, other = artifact("a", b"x"), artifact("b", b"x"), artifact("c", b"y")
    config = TrainerConfig(backbone="tiny_cnn")

    def of(uri=examples, **changes):
        return resume.fingerprint(
            uri,
            ("train", "eval"),
            None,
            dataclasses.replace(config, **changes),
            (100, None),
            None,
        )

    assert len(of()) == resume.FINGERPRINT_CHARS
    assert of() == of(copy) == of(checkpoint_dir="/x", tensorboard_images=0, backup_every_steps=5)
    # Which kind of Kubernetes job runs the workers is not what they learn.
    assert of() == of(launcher="jobset")
    assert of() != of(other)
    assert of() != of(learning_rate=0.5)


# --- a real Trainer, killed mid-epoch --------------------------------------------------

RUN_SCRIPT = """
import json, sys
from tfx.components.trainer.fn_args_utils import FnArgs
from imgpipe.components.trainer import task
task.run_fn(FnArgs(**json.loads(sys.argv[1])))
"""


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    root = tmp_path_factory.mktemp("resume")
    images = th.make_class_folder(str(root / "images"), per_class=40)
    examples = str(root / "examples")
    th.convert(images, examples)
    stats = th.write_stats(str(root / "stats"), SIZE)
    return {"examples": examples, "stats": stats}


def _args(data, pipeline_root: str, execution: int) -> dict:
    """A Trainer execution's arguments, in LocalDagRunner's layout."""
    trainer = os.path.join(pipeline_root, "Trainer")
    return {
        "train_files": [os.path.join(data["examples"], "Split-train", "*")],
        "eval_files": [os.path.join(data["examples"], "Split-eval", "*")],
        "train_steps": STEPS_PER_EPOCH * EPOCHS,
        "eval_steps": None,
        "serving_model_dir": os.path.join(trainer, "model", str(execution), "Format-Serving"),
        "model_run_dir": os.path.join(trainer, "model_run", str(execution)),
        "custom_config": {
            "backbone": "tiny_cnn",
            "image_size": SIZE,
            "batch_size": 16,
            "epochs": EPOCHS,
            "learning_rate": 0.01,
            "tensorboard_images": 0,
            "backup_every_steps": BACKUP_EVERY,
            "image_statistics_uri": data["stats"],
        },
    }


def _backups(pipeline_root: str) -> str:
    return os.path.join(pipeline_root, "Trainer", resume.BACKUPS_DIR)


def _complete_backups(pipeline_root: str) -> list[int]:
    """The optimizer steps of the complete backups there are."""
    root = _backups(pipeline_root)
    steps = []
    for fingerprint in os.listdir(root) if os.path.isdir(root) else []:
        for name in os.listdir(os.path.join(root, fingerprint)):
            if os.path.exists(os.path.join(root, fingerprint, name, layout.MANIFEST_FILE)):
                steps.append(int(name.split("-")[1]))
    return steps


def _kill_mid_epoch(args: dict, pipeline_root: str) -> int:
    """Runs the Trainer in a process, and SIGKILLs it once a backup taken at least
    KILL_AFTER_STEPS steps in exists; returns that backup's step."""
    process = subprocess.Popen(
        [sys.executable, "-c", RUN_SCRIPT, json.dumps(args)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        while process.poll() is None:
            done = [s for s in _complete_backups(pipeline_root) if s >= KILL_AFTER_STEPS]
            if done:
                process.send_signal(signal.SIGKILL)
                assert process.wait(waiting.AT_ONCE_S) == -signal.SIGKILL
                return done[0]
            time.sleep(0.02)
        pytest.fail(f"the Trainer ended before its backup: {process.stderr.read()[-3000:]}")
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(waiting.AT_ONCE_S)
    raise AssertionError("unreachable")


def _accuracy(serving_model_dir: str, examples: str) -> float:
    loaded = tf.saved_model.load(serving_model_dir)
    records = [
        r.numpy()
        for r in tf.data.TFRecordDataset(
            sorted(tf.io.gfile.glob(os.path.join(examples, "Split-eval", "*")))
        )
    ]
    out = loaded.signatures[export.SERVING_EXAMPLES](examples=tf.constant(records))
    truth = [
        tf.train.Example.FromString(r).features.feature["image/class/label"].int64_list.value[0]
        for r in records
    ]
    return float(np.mean(np.argmax(out[export.PROBABILITIES].numpy(), axis=-1) == truth))


class _Count(keras.callbacks.Callback):
    """The optimizer steps a fit() starts from, and the steps it trains."""

    def __init__(self, log: dict[str, list[int]]):
        super().__init__()
        self.log = log

    def on_train_begin(self, logs=None):
        self.log["start"].append(int(self.model.optimizer.iterations.numpy()))

    def on_train_batch_end(self, batch, logs=None):
        self.log["batches"][0] += 1


@pytest.mark.component
def test_a_trainer_killed_mid_epoch_resumes_in_its_retry(data, tmp_path, monkeypatch, caplog):
    root = str(tmp_path / "root")
    killed = _args(data, root, 1)

    at = _kill_mid_epoch(killed, root)

    model_dir = os.path.dirname(killed["serving_model_dir"])
    assert not os.path.exists(os.path.join(model_dir, layout.MANIFEST_FILE))  # nothing published
    # A copy of the backups, damaged: a retry from it starts afresh, and says so.
    damaged_root = str(tmp_path / "damaged")
    shutil.copytree(_backups(root), _backups(damaged_root))
    weights = max(  # of the newest complete backup, the one a retry would take
        os.path.join(d, resume.WEIGHTS_FILE)
        for d, _, files in os.walk(_backups(damaged_root))
        if resume.WEIGHTS_FILE in files and layout.MANIFEST_FILE in files
    )
    with open(weights, "r+b") as f:
        f.truncate(os.path.getsize(weights) // 2)

    log: dict[str, list[int]] = {"start": [], "batches": [0]}
    original = training._callbacks
    monkeypatch.setattr(training, "_callbacks", lambda *a: original(*a) + [_Count(log)])
    retry = _args(data, root, 2)  # a new execution: new output folders
    task.run_fn(FnArgs(**retry))
    monkeypatch.setattr(training, "_callbacks", original)

    resumed = summary.read_if_present(retry["model_run_dir"])
    assert resumed is not None
    r = resumed.resume
    assert r.status == summary.RESUMED, r.note
    assert r.optimizer_steps >= at >= KILL_AFTER_STEPS
    assert (r.epoch, r.step) == divmod(r.optimizer_steps, STEPS_PER_EPOCH)
    assert r.step > 0, r  # mid-epoch
    assert log["start"][0] == r.optimizer_steps  # the optimizer's count was restored
    total = STEPS_PER_EPOCH * EPOCHS
    assert log["batches"][0] == total - r.optimizer_steps  # only the steps left were run
    assert [(p.name, p.epochs_run, p.optimizer_steps) for p in resumed.phases] == [
        ("full", EPOCHS, total)
    ]
    assert r.note.startswith(f"resumed from {_backups(root)}")
    assert not os.path.exists(_backups(root))  # cleaned away after the export
    manifest.verify(os.path.dirname(retry["serving_model_dir"]))

    # The damaged backup's retry is the uninterrupted run to compare with.
    whole = _args(data, damaged_root, 2)
    task.run_fn(FnArgs(**whole))
    fresh = summary.read_if_present(whole["model_run_dir"]).resume
    assert fresh.status == summary.FRESH and "fails its check" in fresh.note
    warnings = [
        record.getMessage()
        for record in caplog.records
        if record.levelno == logging.WARNING and "Preemption backup" in record.getMessage()
    ]
    assert len(warnings) == 1 and "fails its check" in warnings[0]
    assert "training starts afresh" in warnings[0]
    accuracies = {
        name: _accuracy(args["serving_model_dir"], data["examples"])
        for name, args in (("resumed", retry), ("uninterrupted", whole))
    }
    print("resumed from", r, "eval accuracy", accuracies)
    assert min(accuracies.values()) >= MIN_ACCURACY, accuracies
    assert abs(accuracies["resumed"] - accuracies["uninterrupted"]) <= MAX_ACCURACY_GAP


class _Preempted(Exception):
    pass


@pytest.mark.component
def test_a_fine_tune_stopped_in_its_full_phase_resumes_there(data, tmp_path, monkeypatch):
    """A pretrained backbone: `head` (frozen) then `full`; the stop comes mid-epoch in
    `full`, and the retry skips `head` and continues `full` at its optimizer step."""
    from imgpipe.components.trainer import model as model_lib

    weights = str(tmp_path / "tiny.weights.h5")
    tiny = backbones.BACKBONES["tiny_cnn"].build((SIZE, SIZE, 3), None, TrainerConfig(), True)
    tiny.save_weights(weights)
    seen: dict[str, list] = {"fits": []}

    class Stop(keras.callbacks.Callback):
        def on_train_batch_end(self, batch, logs=None):
            steps = int(self.model.optimizer.iterations.numpy())
            if model_lib.backbone_of(self.model).trainable and steps == 6:
                raise _Preempted()

    class Watch(keras.callbacks.Callback):
        def on_train_begin(self, logs=None):
            trainable = model_lib.backbone_of(self.model).trainable
            seen["fits"].append((trainable, int(self.model.optimizer.iterations.numpy())))

    def args(execution: int) -> FnArgs:
        values = _args(data, str(tmp_path / "root"), execution)
        values["train_steps"] = 24  # 3 epochs of 8 steps: 1 head, 2 full
        values["custom_config"].update(
            epochs=3, weights=weights, frozen_epochs=1, backup_every_steps=4
        )
        return FnArgs(**values)

    original = training._callbacks
    monkeypatch.setattr(training, "_callbacks", lambda *a: original(*a) + [Stop()])
    with pytest.raises(_Preempted):
        task.run_fn(args(1))
    monkeypatch.setattr(training, "_callbacks", lambda *a: original(*a) + [Watch()])
    retry = args(2)
    task.run_fn(retry)

    trained = summary.read_if_present(retry.model_run_dir)
    r = trained.resume
    assert (r.status, r.phase, r.epoch, r.step, r.optimizer_steps) == (
        summary.RESUMED,
        "full",
        1,
        4,
        4,
    )
    # The rest of full's first epoch (4 steps), then its second: backbone trainable.
    assert seen["fits"] == [(True, 4), (True, 8)]
    assert [(p.name, p.epochs_run, p.optimizer_steps) for p in trained.phases] == [
        ("head", 1, 8),
        ("full", 2, 16),
    ]


MIRRORED_SCRIPT = """
import os, sys
import tensorflow as tf
cpu = tf.config.list_physical_devices("CPU")[0]
tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
import keras
from tfx.components.trainer.fn_args_utils import FnArgs
from imgpipe.components.trainer import devices, summary, task, training
plan = devices.plan_devices(*devices.visible_devices())
assert plan.strategy == devices.MIRRORED and plan.replicas == 2, plan
examples, stats, root = sys.argv[1:4]

class Stop(keras.callbacks.Callback):
    def on_train_batch_end(self, batch, logs=None):
        if int(self.model.optimizer.iterations.numpy()) == 10:
            raise KeyboardInterrupt

def args(execution):
    return FnArgs(
        train_files=[os.path.join(examples, "Split-train", "*")],
        eval_files=[os.path.join(examples, "Split-eval", "*")],
        train_steps=12, eval_steps=None,
        serving_model_dir=os.path.join(root, "Trainer", "model", execution, "Format-Serving"),
        model_run_dir=os.path.join(root, "Trainer", "model_run", execution),
        custom_config={"backbone": "tiny_cnn", "image_size": 32, "batch_size": 8, "epochs": 2,
                       "tensorboard_images": 0, "backup_every_steps": 3,
                       "image_statistics_uri": stats})

original = training._callbacks
training._callbacks = lambda *a: original(*a) + [Stop()]
try:
    task.run_fn(args("1"))
except KeyboardInterrupt:
    print("STOPPED")
training._callbacks = original
task.run_fn(args("2"))
trained = summary.read_if_present(os.path.join(root, "Trainer", "model_run", "2"))
print("RESUMED", trained.resume.step, trained.resume.optimizer_steps,
      trained.phases[-1].optimizer_steps)
"""


@pytest.mark.component
@pytest.mark.timeout(waiting.TRAINING_TEST_S)
def test_a_mirrored_run_resumes_mid_epoch(data, tmp_path):
    """MirroredStrategy on two logical CPUs (set before TF starts: a fresh process),
    stopped at step 10 of 12 (6 a epoch): the retry resumes from the backup at step 9."""
    result = subprocess.run(
        [sys.executable, "-c", MIRRORED_SCRIPT, data["examples"], data["stats"], str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=waiting.TRAINING_S,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "STOPPED" in result.stdout
    assert "RESUMED 3 9 12" in result.stdout, result.stdout
