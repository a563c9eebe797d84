"""Training on several workers (trainer.workers; docs/distributed-training.md): the
settings refused, each worker's share of the data, 2 workers against 1 on the same data
and global batch, a worker killed mid-epoch (the job fails in bounded time, nothing is
published, and the rerun resumes), and a worker that cannot reach the others."""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import subprocess
import sys
import threading
import time

import numpy as np
import pytest
import tensorflow as tf
from tfx.components.trainer.fn_args_utils import FnArgs

from imgpipe.components.common.formats import layout, manifest
from imgpipe.components.trainer import (
    devices,
    export,
    input,
    resume,
    summary,
    task,
)
from imgpipe.components.trainer.config import from_custom_config
from imgpipe.components.trainer.several_workers import (
    cluster,
    join_watchdog,
    local_processes,
    replicas,
)
from imgpipe.components.trainer.several_workers import job as job_lib
from imgpipe.pipelines import run_summary
from tests import procfs, waiting
from tests import trainer_helpers as th

SIZE = 32
GLOBAL_BATCH = 16
# 2 workers against 1 on the same data, seed and global batch: the eval accuracies of
# the exported models differ by at most this (3 of the 30 eval images).
ACCURACY_TOLERANCE = 0.10
MIN_ACCURACY = 0.85
# A worker killed mid-epoch fails the job within this many seconds: the launcher notices
# it within a poll (0.2 s), where the survivor alone would end only at its heartbeat
# timeout. The product's promise, "at once"; measured busy, 0.6 s.
FAILURE_BOUND_SECONDS = cluster.Timeouts().heartbeat_s
# A worker alone: its connect timeout (nothing listens at its peer's address, so it
# always runs out), and how long past it it may take to end: the TensorFlow import and
# the probe. Measured busy: both ended 18 s after they started, 12 s past it.
CONNECT_SECONDS = 6.0
CONNECT_SLACK_SECONDS = 90.0


# --- the settings and the decisions (no TensorFlow process started) --------------------


@pytest.mark.unit
@pytest.mark.parametrize("workers", [0, -1])
def test_workers_below_one_are_refused_naming_the_setting_and_the_fix(workers):
    with pytest.raises(
        ValueError, match=rf"workers must be 1 .* got {workers}; set trainer.workers=1"
    ):
        from_custom_config({"workers": workers})
    assert from_custom_config({"workers": 3}).workers == 3


@pytest.mark.unit
def test_each_split_is_shared_by_file_when_its_files_divide_evenly():
    shard, why = input.choose_shard(4, 2, 1, input.TRAIN)
    assert shard == input.Shard(2, 1, input.BY_FILE) and why == "2 of its 4 files"
    shard, why = input.choose_shard(3, 2, 0, input.TRAIN)
    assert shard.by == input.BY_RECORD
    assert "do not divide evenly among 2 workers" in why and "num_shards" in why
    shard, why = input.choose_shard(1, 2, 0, input.TRAIN)
    assert shard.by == input.BY_RECORD and "fewer than the 2 workers" in why
    # EVAL: always by record, so that the workers' shares (and steps) are alike.
    assert input.choose_shard(4, 2, 0, input.EVAL)[0].by == input.BY_RECORD
    with pytest.raises(ValueError):
        input.Shard(2, 2, input.BY_FILE)


@pytest.mark.unit
def test_gpus_are_divided_among_the_workers_or_refused():
    assert local_processes.assign_gpus(["0", "1", "2", "3"], 2, 2) == ["0,1", "2,3"]
    assert local_processes.assign_gpus(["5", "7"], 1, 2) == ["5", "7"]
    assert local_processes.assign_gpus(["0"], 0, 2) == ["", ""]  # CPU workers: GPUs hidden
    assert local_processes.assign_gpus([], None, 3) == ["", "", ""]
    with pytest.raises(ValueError, match=r"cannot share a GPU; set trainer.num_gpus .*at most 1"):
        local_processes.assign_gpus(["0", "1"], None, 2)
    with pytest.raises(
        ValueError, match=r"needs 6 GPUs, and 4 are visible; set trainer.num_gpus to 1"
    ):
        local_processes.assign_gpus(["0", "1", "2", "3"], 2, 3)


@pytest.mark.unit
def test_tf_config_names_the_cluster_and_the_task():
    member = cluster.Member(("localhost:1001", "localhost:1002"), 1)
    assert json.loads(cluster.tf_config(member)) == {
        "cluster": {"worker": ["localhost:1001", "localhost:1002"]},
        "task": {"type": "worker", "index": 1},
    }
    assert cluster.from_tf_config(cluster.tf_config(member)) == member
    assert not member.chief and cluster.Member(member.addresses, 0).chief
    for bad in (
        "",
        "{}",
        '{"cluster": {"worker": ["a:1"]}, "task": {"type": "worker", "index": 0}}',
    ):
        with pytest.raises(ValueError, match="TF_CONFIG"):
            cluster.from_tf_config(bad)
    addresses = cluster.local_addresses(3)
    assert len(set(addresses)) == 3 and all(a.startswith("localhost:") for a in addresses)


@pytest.mark.unit
def test_a_multi_worker_plan_counts_the_replicas_of_every_worker():
    cpu = devices.multi_worker_plan(["/job:worker/replica:0/task:1/device:CPU:0"], 2)
    assert (cpu.strategy, cpu.replicas, cpu.precision_policy) == (
        devices.MULTI_WORKER,
        2,
        devices.FLOAT32,
    )
    assert devices.all_reduce(cpu) == "RING"
    gpus = [f"/job:worker/replica:0/task:0/device:GPU:{i}" for i in range(2)]
    gpu = devices.multi_worker_plan(gpus, 3)
    assert (gpu.replicas, gpu.precision_policy, devices.all_reduce(gpu)) == (
        6,
        devices.MIXED_FLOAT16,
        "NCCL",
    )
    assert devices.all_reduce(devices.plan_devices([], ["/device:CPU:0"])) == ""
    with pytest.raises(ValueError, match="made once"):
        devices.make_strategy(cpu)


@pytest.mark.unit
def test_a_failed_worker_is_named_by_its_own_line(tmp_path):
    log = tmp_path / "worker-1.log"
    log.write_text(
        "Traceback ...\nUnavailableError: peer gone\n"
        f"{cluster.ERROR_MARK} RuntimeError: the real cause\nmore output\n"
    )
    assert replicas.failure_line(str(log)) == "RuntimeError: the real cause"
    log.write_text("I0000 start\nE0000 UnavailableError: Socket closed\nlast words\n")
    assert replicas.failure_line(str(log)) == "E0000 UnavailableError: Socket closed"
    assert replicas.failure_line(str(tmp_path / "none.log")) == ""


@pytest.mark.unit
def test_the_run_summary_says_how_many_workers_trained_and_which_strategy(tmp_path):
    base = summary.TrainingSummary("tiny_cnn", SIZE, None, "off", "", 20, ())
    summary.write(str(tmp_path / "one"), base)
    assert not [
        line
        for line in run_summary.training_lines(str(tmp_path / "one"))
        if line.startswith("distribution")
    ]  # a summary from before distribution: nothing said
    several = summary.Distribution(devices.MULTI_WORKER, 2, 2, GLOBAL_BATCH, "RING")
    summary.write(str(tmp_path / "two"), dataclasses.replace(base, distribution=several))
    assert (
        "distribution         multi_worker_mirrored: 2 workers, RING all-reduce, 2 replicas, "
        "global batch 16"
    ) in run_summary.training_lines(str(tmp_path / "two"))


# --- on tiny data ------------------------------------------------------------------------


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    """One set of images converted twice: 3 train shards (shared by record between 2
    workers) and 2 (shared by file)."""
    root = tmp_path_factory.mktemp("distributed")
    images = th.make_class_folder(str(root / "images"), per_class=40)
    converted = {}
    for shards in (2, 3):
        examples = str(root / f"examples-{shards}")
        th.convert(images, examples, num_shards=shards)
        converted[shards] = examples
    return {"examples": converted, "stats": th.write_stats(str(root / "stats"), SIZE)}


def _fn_args(data, out: str, execution: int = 1, shards: int = 3, **custom) -> FnArgs:
    """A Trainer execution's arguments in LocalDagRunner's layout (backups in
    <out>/Trainer/.backups); the global batch is GLOBAL_BATCH whatever the workers."""
    examples = data["examples"][shards]
    count = custom.get("workers", 1)
    config = {
        "backbone": "tiny_cnn",
        "image_size": SIZE,
        "batch_size": GLOBAL_BATCH // count,
        "epochs": 2,
        "learning_rate": 0.01,
        "tensorboard_images": 0,
        "early_stopping_patience": 0,
        "image_statistics_uri": data["stats"],
        **custom,
    }
    return FnArgs(
        train_files=[os.path.join(examples, "Split-train", "*")],
        eval_files=[os.path.join(examples, "Split-eval", "*")],
        train_steps=40,
        eval_steps=None,
        serving_model_dir=os.path.join(out, "Trainer", "model", str(execution), "Format-Serving"),
        model_run_dir=os.path.join(out, "Trainer", "model_run", str(execution)),
        custom_config=config,
    )


def _accuracy(serving_model_dir: str, examples: str) -> float:
    loaded = tf.saved_model.load(serving_model_dir)
    records = [
        r.numpy() for r in input.read_records(input.split_source(examples, "eval"), input.EVAL)
    ]
    out = loaded.signatures[export.SERVING_EXAMPLES](examples=tf.constant(records))
    truth = [
        tf.train.Example.FromString(r).features.feature["image/class/label"].int64_list.value[0]
        for r in records
    ]
    return float(np.mean(np.argmax(out[export.PROBABILITIES].numpy(), axis=-1) == truth))


def _worker_pids() -> dict[int, int]:
    """This test process's workers: index -> pid (from their TF_CONFIG)."""
    found = {}
    for pid in procfs.descendants(os.getpid()):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                argv = f.read().split(b"\0")
            with open(f"/proc/{pid}/environ", "rb") as f:
                env = dict(e.split(b"=", 1) for e in f.read().split(b"\0") if b"=" in e)
        except OSError:
            continue
        if local_processes.WORKER_MODULE.encode() in argv and b"TF_CONFIG" in env:
            found[json.loads(env[b"TF_CONFIG"])["task"]["index"]] = pid
    return found


@pytest.mark.component
def test_each_worker_reads_its_own_share_of_each_split(data):
    """Shared by file (2 shards) and by record (3 shards, and eval): the two workers'
    records are disjoint and together the whole split, each pass."""
    for shards in (2, 3):
        for split, mode in (("train", input.TRAIN), ("eval", input.EVAL)):
            source = input.split_source(data["examples"][shards], split)
            shares = []
            for index in range(2):
                shard, _ = input.choose_shard(len(source.files), 2, index, mode)
                records = input.read_records(source, mode, seed=7, shard=shard)
                shares.append([r.numpy() for r in records])
            everything = [r.numpy() for r in input.read_records(source, mode)]
            assert not set(shares[0]) & set(shares[1]), (shards, split)
            assert sorted(shares[0] + shares[1]) == sorted(everything), (shards, split)
            assert min(len(s) for s in shares) >= len(everything) // 3, (shards, split)


@pytest.mark.component
def test_bad_settings_are_refused_before_any_worker_starts(data, tmp_path):
    args = _fn_args(data, str(tmp_path / "many"), workers=1000, batch_size=1)
    with pytest.raises(
        ValueError,
        match=r"trainer.workers=1000 is more than the \d+ images .* to \d+ or fewer",
    ):
        task.run_fn(args)
    args = _fn_args(data, str(tmp_path / "fp16"), workers=2, mixed_precision="on")
    with pytest.raises(ValueError, match="mixed_precision='on' needs a GPU"):
        task.run_fn(args)
    assert not os.path.exists(os.path.join(args.model_run_dir, job_lib.WORKER_LOGS_DIR))
    assert not _worker_pids()


@pytest.mark.component
def test_two_workers_reach_the_accuracy_of_one(data, tmp_path, monkeypatch):
    """The same data, seed and global batch (16: 1 x 16, then 2 x 8), 40 steps: the
    exported models' eval accuracies agree within ACCURACY_TOLERANCE. The train split's
    3 shards do not divide between 2 workers: they share it by record, and say why."""
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    monkeypatch.setenv("TMPDIR", str(scratch))  # the workers' own folders go here
    accuracies = {}
    for count in (1, 2):
        args = _fn_args(data, str(tmp_path / f"w{count}"), workers=count)
        started = time.monotonic()
        task.run_fn(args)
        model_dir = os.path.dirname(args.serving_model_dir)
        files = manifest.verify(model_dir, checksums=True).files
        assert "Format-Serving/saved_model.pb" in files  # exactly one SavedModel
        assert sorted(os.listdir(model_dir)) == ["Format-Serving", layout.MANIFEST_FILE]
        accuracies[count] = _accuracy(args.serving_model_dir, data["examples"][3])
        trained = summary.read_if_present(args.model_run_dir)
        print(f"{count} worker(s): {time.monotonic() - started:.0f} s, {trained.distribution}")
        assert trained.distribution.workers == count
        assert trained.distribution.global_batch == GLOBAL_BATCH
        assert trained.steps_per_epoch == 20 and trained.phases[-1].optimizer_steps == 40
        assert trained.label_audit is not None and trained.label_audit.checked
    assert trained.distribution == summary.Distribution(
        devices.MULTI_WORKER, 2, 2, GLOBAL_BATCH, "RING"
    )
    logs = os.path.join(args.model_run_dir, job_lib.WORKER_LOGS_DIR)
    assert sorted(os.listdir(logs)) == ["worker-0.log", "worker-1.log"]
    with open(os.path.join(logs, "worker-1.log")) as f:
        log = f.read()
    assert "worker 1 of 2 reads one record in 2 of every file, as its 3 files do not divide" in log
    assert "joined: 2 replicas in sync" in log
    assert os.listdir(scratch) == []  # the other worker's export and logs, removed
    assert not os.path.exists(os.path.join(str(tmp_path / "w2"), "Trainer", resume.BACKUPS_DIR))
    print("eval accuracy by workers", accuracies)
    assert min(accuracies.values()) >= MIN_ACCURACY, accuracies
    assert abs(accuracies[1] - accuracies[2]) <= ACCURACY_TOLERANCE, accuracies


@pytest.mark.component
def test_a_worker_killed_mid_epoch_fails_the_job_and_the_rerun_resumes(data, tmp_path):
    """Worker 1 is SIGKILLed once a backup of step 8 or later exists (backups every 4
    steps of 20 a epoch): the job fails within FAILURE_BOUND_SECONDS naming it, no
    worker is left, nothing is published; the rerun resumes from the backup."""
    out = str(tmp_path / "root")
    settings = {"workers": 2, "backup_every_steps": 4}
    killed_at: list[float] = []

    def kill_worker_1_after_a_backup() -> None:
        backups = os.path.join(out, "Trainer", resume.BACKUPS_DIR)
        deadline = time.monotonic() + waiting.JOB_S
        while time.monotonic() < deadline:
            steps = [
                int(name.split("-")[1])
                for root, names, _ in os.walk(backups)
                for name in names
                if os.path.exists(os.path.join(root, name, layout.MANIFEST_FILE))
            ]
            pids = _worker_pids()
            if steps and max(steps) >= 8 and 1 in pids:
                os.kill(pids[1], signal.SIGKILL)
                killed_at.append(time.monotonic())
                return
            time.sleep(0.05)

    killer = threading.Thread(target=kill_worker_1_after_a_backup, daemon=True)
    killer.start()
    first = _fn_args(data, out, 1, shards=2, **settings)
    with pytest.raises(replicas.WorkersFailed) as failed:
        task.run_fn(first)
    ended = time.monotonic()
    killer.join(waiting.AT_ONCE_S)
    assert killed_at, "the workers ended before a backup of step 8"
    print(f"the job failed {ended - killed_at[0]:.1f} s after the kill: {failed.value}")
    assert ended - killed_at[0] < FAILURE_BOUND_SECONDS
    message = str(failed.value)
    assert (
        message.startswith("trainer worker 1 of 2 (localhost:") and "killed by SIGKILL" in message
    )
    assert "nothing was exported" in message and "\n" not in message
    assert not _worker_pids()
    model_dir = os.path.dirname(first.serving_model_dir)
    assert not os.path.exists(os.path.join(model_dir, layout.MANIFEST_FILE))
    assert not os.path.exists(first.serving_model_dir)

    rerun = _fn_args(data, out, 2, shards=2, **settings)
    task.run_fn(rerun)
    trained = summary.read_if_present(rerun.model_run_dir)
    assert trained.resume.status == summary.RESUMED, trained.resume.note
    assert trained.resume.optimizer_steps >= 8
    assert trained.phases[-1].optimizer_steps == 40
    assert trained.distribution.workers == 2
    manifest.verify(os.path.dirname(rerun.serving_model_dir), checksums=True)
    assert not os.path.exists(os.path.join(out, "Trainer", resume.BACKUPS_DIR))


ALONE = """
import sys
from imgpipe.components.trainer.several_workers import cluster
index, dead, seconds = int(sys.argv[1]), sys.argv[2], float(sys.argv[3])
own = cluster.local_addresses(1)[0]
addresses = (own, dead) if index == 0 else (dead, own)
cluster.connect(cluster.Member(addresses, index), cluster.Timeouts(connect_s=seconds))
print("JOINED")
"""


@pytest.mark.component
def test_a_worker_that_cannot_reach_the_others_fails_in_bounded_time(tmp_path):
    """Worker 0 (the cluster's leader, which TensorFlow would let wait forever) and
    worker 1, each alone with a peer whose port nothing listens on: each ends within
    its connect timeout plus CONNECT_SLACK_SECONDS, with one line naming that address."""
    dead = cluster.local_addresses(1)[0]
    started = time.monotonic()
    alone = [
        subprocess.Popen(
            [sys.executable, "-c", ALONE, str(index), dead, str(CONNECT_SECONDS)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for index in (0, 1)
    ]
    for index, process in enumerate(alone):
        try:
            out, err = process.communicate(timeout=CONNECT_SECONDS + CONNECT_SLACK_SECONDS)
        except subprocess.TimeoutExpired:
            for p in alone:
                p.kill()
            pytest.fail(f"worker {index} alone did not end in bounded time")
        lines = [line for line in err.splitlines() if line.startswith(cluster.ERROR_MARK)]
        print(f"worker {index} alone: exit {process.returncode}, {lines}")
        assert "JOINED" not in out
        assert process.returncode in (cluster.EXIT_UNREACHABLE, -signal.SIGKILL)
        assert len(lines) == 1, err[-3000:]
        assert lines[0].startswith(f"{cluster.ERROR_MARK} trainer worker {index} of 2 (localhost:")
        assert f"cannot reach {dead} within {CONNECT_SECONDS:.0f} s" in lines[0]
    print(f"both ended {time.monotonic() - started:.0f} s after they started")
    assert join_watchdog.answers(dead) is False
