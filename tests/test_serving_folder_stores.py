"""The serving folder on object stores (docs/serving-folder.md), against moto's S3 server
and the GCS emulator: the lease's exclusive create, two retrains at once taking turns on
S3, and a model server's view of the folder while a push is killed mid-copy."""

from __future__ import annotations

import os
import subprocess
import sys
import threading

import pytest

from imgpipe.components.common.formats import model_config, served_models
from imgpipe.components.common.runtime import phases
from imgpipe.components.common.storage import fileio, serving_lock
from imgpipe.components.pusher import executor as pusher
from tests import object_stores, waiting
from tests.test_serving_folder import fake_model

pytestmark = pytest.mark.platform

SERVERS = {"s3": object_stores.s3_server, "gcs": object_stores.gcs_server}
# check_writable refuses a missing bucket "in seconds", before any training: not after a
# client's retries, which take minutes (google-cloud-storage's, two). The product's
# promise, held with a margin: measured busy, under 1.5 s on each emulator.
REFUSAL_BOUND_S = 60.0


@pytest.fixture(scope="module", params=sorted(SERVERS))
def store(request):
    with SERVERS[request.param]() as started:
        yield started


@pytest.fixture(scope="module")
def s3():
    with object_stores.s3_server() as started:
        yield started


def test_exclusive_create_on_s3_lets_one_of_many_racers_win(s3):
    path = s3.uri("race", "lock")
    barrier = threading.Barrier(6)
    won: list[bool] = []

    def race(i: int) -> None:
        barrier.wait()
        won.append(fileio.create_new(path, str(i).encode()))

    threads = [threading.Thread(target=race, args=(i,)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert won.count(True) == 1, won
    assert not fileio.create_new(path, b"late")
    fileio.remove(s3.uri("race"))


def test_the_lease_is_taken_and_given_back_on_each_store(store):
    serving = store.uri("lease", "serving")
    lease = serving_lock.acquire(serving, "run-1")
    assert serving_lock.current(serving) == lease
    assert serving_lock.release(serving, lease.token)
    assert serving_lock.current(serving) is None
    fileio.remove(store.uri("lease"))


def test_the_lease_heartbeats_and_is_checked_writable_on_each_store(store, monkeypatch):
    """The run's lease renews and hands on through the store's own writes, and a serving
    folder in a bucket that does not exist is refused before any step, in one line."""
    import time

    monkeypatch.setattr(serving_lock, "BEAT_SECONDS", 0.05)
    serving = store.uri("beat", "serving")
    serving_lock.check_writable(serving)
    lease = serving_lock.acquire(serving, "run-1")
    with serving_lock.hold(serving, lease.token):
        first = serving_lock.current(serving)
        waiting.until(lambda: serving_lock.current(serving).beat > first.beat, "a heartbeat")
    assert not serving_lock.current(serving).working
    assert serving_lock.release(serving, lease.token)
    fileio.remove(store.uri("beat"))
    missing = f"{store.scheme}{object_stores.BUCKET}-that-does-not-exist/serving"
    started = time.monotonic()
    with pytest.raises(serving_lock.ServingDirError, match="cannot be written"):
        serving_lock.check_writable(missing)
    assert time.monotonic() - started < REFUSAL_BOUND_S


def test_two_retrains_at_once_take_turns_on_s3(s3, tmp_path, monkeypatch):
    from tests import test_evaluator as te
    from tests.test_serving_folder_runs import check_they_took_turns, export, retrain_at_once

    monkeypatch.setattr(serving_lock, "POLL_SECONDS", 0.05)
    trained = te._trained_model()
    examples = te._examples(tmp_path)
    candidates = [export(trained, str(tmp_path / f"candidate{i}")) for i in range(2)]
    serving = s3.uri("turns", "serving")
    check_they_took_turns(retrain_at_once(tmp_path, examples, candidates, serving), serving)
    fileio.remove(s3.uri("turns"))


class Watcher(threading.Thread):
    """Polls the serving folder as TF Serving pointed at models.config would: reads the
    file, and checks that the one version it names is whole against its manifest."""

    def __init__(self, serving: str) -> None:
        super().__init__()
        self.serving = serving
        self.stop = threading.Event()
        self.seen: list[tuple[int, str | None]] = []  # (version, damage or None)
        self.partial_listed = False  # a numeric folder without PUSH_COMPLETE was listed

    def look(self) -> None:
        config = f"{self.serving}/{model_config.MODEL_CONFIG_FILE}"
        if not fileio.exists(config):
            return
        version = model_config.config_version(fileio.read_bytes(config).decode())
        assert version is not None
        folder = f"{self.serving}/{version}"
        problem = None
        if not fileio.exists(f"{folder}/{served_models.PUSH_COMPLETE_FILE}"):
            problem = "no PUSH_COMPLETE"
        else:
            # Sizes on every look (a half-copied file or version differs in them), and
            # every byte once per version.
            first_look = version not in {v for v, _ in self.seen}
            problem = served_models.damage(folder, checksums=first_look)
        self.seen.append((version, problem))
        numbered = [n for n in fileio.list_dir(self.serving) if n.isdigit()]
        complete = {str(v) for v in served_models.complete_versions(self.serving)}
        self.partial_listed |= any(n not in complete for n in numbered)

    def run(self) -> None:
        while not self.stop.wait(0.1):  # a poll, not a timing: every look is checked
            self.look()
        self.look()


def push_in_a_process(model: str, serving: str, stop_at: str | None) -> int:
    env = dict(os.environ)
    env.pop(phases.STOP_AT_ENV, None)
    if stop_at:
        env[phases.STOP_AT_ENV] = stop_at
    code = (
        "import sys; from imgpipe.components.pusher.executor import publish; "
        "publish(sys.argv[1], sys.argv[2])"
    )
    return subprocess.run([sys.executable, "-c", code, model, serving], env=env).returncode


def check_a_server_sees_only_whole_versions(serving: str, tmp_path) -> Watcher:
    """Pushes are killed mid-copy and before the manifest, then one completes, while a
    Watcher polls; returns the Watcher, having checked everything it saw was whole."""
    first = pusher.publish(fake_model(str(tmp_path / "m1")), serving)
    version = int(first.rsplit("/", 1)[1])
    watcher = Watcher(serving)
    watcher.start()
    try:
        for phase in (phases.PUBLISHING, phases.PUBLISHED):  # mid-copy; before the manifest
            model = fake_model(str(tmp_path / f"m-{phase}"), graph=b"new graph" * 300)
            assert push_in_a_process(model, serving, phase) == -9
            assert served_models.find(serving).model.version == version
        killed_listing = watcher.partial_listed
        whole = fake_model(str(tmp_path / "m-whole"))
        assert push_in_a_process(whole, serving, None) == 0
    finally:
        watcher.stop.set()
        watcher.join()
    watcher.partial_listed = killed_listing
    assert all(problem is None for _, problem in watcher.seen), watcher.seen
    versions = [v for v, _ in watcher.seen]
    newest = served_models.find(serving).model.version
    assert versions[0] == version and versions[-1] == newest > version
    assert versions == sorted(versions) and set(versions) == {version, newest}
    # The killed pushes' folders are gone: the next push removed them.
    assert served_models.complete_versions(serving) == [newest, version]
    assert sorted(n for n in fileio.list_dir(serving) if n.isdigit()) == [
        str(version),
        str(newest),
    ]
    return watcher


def test_a_model_server_sees_only_whole_versions_while_a_push_is_killed(store, tmp_path):
    watcher = check_a_server_sees_only_whole_versions(store.uri("watched", "serving"), tmp_path)
    # What a server listing the version folders (--model_base_path) would have loaded.
    assert watcher.partial_listed
    fileio.remove(store.uri("watched"))


def test_a_rollback_on_each_store_is_atomic_and_followed(store, tmp_path):
    """`imgpipe rollback` on an object store: killed between its two writes it leaves
    models.config naming a whole version; run again it serves the previous one, which the
    next retrain's champion follows; the history records it."""
    from imgpipe.components.common.formats import rollback, serving_history

    serving = store.uri("rollback", "serving")
    for version in (100, 200):
        pusher.publish(fake_model(str(tmp_path / f"m{version}")), serving, now=version)
    env = {**os.environ, phases.STOP_AT_ENV: phases.POINTING}
    code = "import sys; from imgpipe.components.common.formats import rollback; "
    code += "rollback.rollback(sys.argv[1])"
    assert subprocess.run([sys.executable, "-c", code, serving], env=env).returncode == -9
    assert model_config.served_version(serving) == 200
    assert served_models.find(serving, checksums=True).model.version == 200

    done = rollback.rollback(serving)
    assert (done.version, done.was, done.warning) == (100, 200, "")
    for name in (model_config.MODEL_CONFIG_FILE, model_config.KSERVE_CONFIG_FILE):
        text = fileio.read_bytes(f"{serving}/{name}").decode()
        assert model_config.config_version(text) == 100
    found = served_models.find(serving, checksums=True)
    assert (found.model.version, found.head, found.served) == (100, 200, 100)
    assert [p.status for p in found.passed] == [served_models.NOT_SERVED]
    decisions, _ = serving_history.read(serving)
    assert [(d.kind, d.model_version) for d in decisions] == [(serving_history.ROLLBACK, 100)]
    fileio.remove(store.uri("rollback"))


def test_earlier_kubeflow_run_folders_are_collected_on_each_store(store, tmp_path):
    """Retention on Kubeflow (pipelines/retention_runs.py) on the store KFP writes to: an
    earlier run's folder goes, but the Examples of a span whose record stays."""
    import time

    from imgpipe.components.common.formats import spans
    from imgpipe.pipelines import retention, run_folders
    from imgpipe.pipelines.collect import Scope, collect

    serving, root = store.uri("kfp", "serving"), store.uri("kfp", "root")
    pusher.publish(fake_model(str(tmp_path / "model")), serving, now=100)

    def kfp_run(run_id: str) -> str:
        folder = f"{root}/imgpipe/{run_id}"
        for task, artifact in (("ImageExampleGen", "examples"), ("Trainer", "model")):
            fileio.write_atomic(f"{folder}/{task}/{artifact}/data.bin", b"x" * 10)
        return folder

    old, kept = kfp_run("run-1"), kfp_run("run-2")
    now = time.time()
    run_folders.register(root, old, now - 5 * 86400)
    run_folders.register(root, kept, now - 4 * 86400)
    spans.admit(serving, 2, f"{kept}/ImageExampleGen/examples", ("a",))

    collected = collect(
        Scope(serving, retention.RetentionConfig(), trainer_spans=1, pipeline_root=root)
    )

    assert collected.problems == ()
    assert fileio.list_files(old) == []
    assert fileio.list_files(kept) == ["ImageExampleGen/examples/data.bin"]
    assert [r.run_folder for r in run_folders.registered(root)] == [kept]
    fileio.remove(store.uri("kfp"))
