"""The serving folder under damage and concurrency (docs/serving-folder.md): pushes carry
a manifest and are verified, damaged ones are named and passed over the same way by
every reader, decisions on one serving folder take turns, and a push is refused when
the champion it was judged against is no longer the newest."""

from __future__ import annotations

import os
import threading
import time

import pytest

from imgpipe.components.common.formats import label_map, model_config, served_models
from imgpipe.components.common.storage import fileio, serving_lock
from imgpipe.components.pusher import executor as pusher

BIG = 1024 * 1024 + 7  # above manifest.CHECKSUMMED_ON_READ_BYTES: sizes only, by default


def fake_model(path: str, labels=("a", "b"), graph: bytes = b"graph" * 100) -> str:
    """A serving model's files (not a loadable SavedModel): enough for the folder's rules."""
    os.makedirs(os.path.join(path, "variables"), exist_ok=True)
    with open(os.path.join(path, "saved_model.pb"), "wb") as f:
        f.write(graph)
    with open(os.path.join(path, "variables", "variables.data-00000-of-00001"), "wb") as f:
        f.write(bytes(range(256)) * (BIG // 256) + b"x" * (BIG % 256))
    extra = os.path.join(path, served_models.ASSETS_EXTRA_DIR)
    os.makedirs(extra, exist_ok=True)
    label_map.write(extra, list(labels))
    return path


def truncate(path: str, size: int = 1) -> None:
    with open(path, "r+b") as f:
        f.truncate(size)


@pytest.mark.unit
def test_a_push_carries_a_manifest_of_every_file_and_names_itself_to_model_servers(tmp_path):
    from imgpipe.components.common.formats import manifest

    serving = str(tmp_path / "serving")
    extra = tmp_path / "reference.txt"
    extra.write_text("reference set")
    pushed = pusher.publish(
        fake_model(str(tmp_path / "m1")), serving, now=100, extras={"eval/ref.txt": str(extra)}
    )
    listed = manifest.read(pushed)
    assert sorted(listed.files) == [
        "assets.extra/label_map.json",
        "assets.extra/labels.txt",
        "eval/ref.txt",
        "saved_model.pb",
        "variables/variables.data-00000-of-00001",
    ]
    assert listed.files["saved_model.pb"].size == 500
    found = served_models.find(serving)
    assert found.model == served_models.ServedModel(pushed, 100, ("a", "b"))
    assert (found.passed, found.note, found.head) == ((), "", 100)
    for name, base in (
        (model_config.MODEL_CONFIG_FILE, serving),
        (model_config.KSERVE_CONFIG_FILE, "/mnt/models"),
    ):
        text = open(os.path.join(serving, name)).read()
        assert f'base_path: "{base}"' in text and 'name: "serving"' in text
        assert model_config.config_version(text) == 100


@pytest.mark.unit
def test_damaged_pushes_are_named_in_one_line_and_passed_over(tmp_path):
    serving = str(tmp_path / "serving")
    for version in (100, 200, 300):
        pusher.publish(fake_model(str(tmp_path / f"m{version}")), serving, now=version)
    truncate(os.path.join(serving, "300", "saved_model.pb"), 10)
    found = served_models.find(serving)
    assert found.model.version == 200 and found.head == 300
    assert found.note == f"{serving}/300: damaged (saved_model.pb: size 10 != 500); using 200"

    # A small file is checksummed on every read; a large one only with checksums=True.
    label_path = os.path.join(serving, "200", "assets.extra", "label_map.json")
    data = bytearray(open(label_path, "rb").read())
    data[-2] ^= 1
    open(label_path, "wb").write(bytes(data))
    weights = os.path.join(serving, "100", "variables", "variables.data-00000-of-00001")
    data = bytearray(open(weights, "rb").read())
    data[5] ^= 1
    open(weights, "wb").write(bytes(data))
    found = served_models.find(serving)
    assert found.model.version == 100
    assert f"{serving}/200: damaged (assets.extra/label_map.json: CRC-32C " in found.note
    checked = served_models.find(serving, checksums=True)
    assert checked.model is None and checked.note.endswith("; no sound push left"), checked.note
    assert f"{serving}/100: damaged (variables/variables.data-00000-of-00001: CRC-32C" in (
        checked.note
    )

    # A file added or removed after the push is damage too.
    os.remove(weights)
    open(os.path.join(serving, "100", "stray"), "w").close()
    reasons = [p.reason for p in served_models.find(serving).passed]
    assert reasons[-1] == "variables/variables.data-00000-of-00001: missing"


@pytest.mark.unit
def test_a_push_from_before_manifests_is_used_as_legacy_if_its_labels_read(tmp_path):
    serving = str(tmp_path / "serving")
    for version in (100, 200):
        pusher.publish(fake_model(str(tmp_path / f"m{version}")), serving, now=version)
    os.remove(os.path.join(serving, "100", "manifest.json"))  # as an earlier release pushed
    truncate(os.path.join(serving, "200", "assets.extra", "label_map.json"))
    found = served_models.find(serving)
    assert found.model.version == 100
    assert found.note == (
        f"{serving}/200: damaged (assets.extra/label_map.json: size 1 != 55); "
        f"{serving}/100: legacy (no manifest.json, pushed by an earlier release: not "
        "verified); using 100"
    )
    # A legacy push whose labels do not read is damaged.
    truncate(os.path.join(serving, "100", "assets.extra", "label_map.json"))
    found = served_models.find(serving)
    assert found.model is None and [p.status for p in found.passed] == ["damaged", "damaged"]
    assert found.note.endswith("; no sound push left")


@pytest.mark.unit
def test_a_push_is_refused_when_the_champion_it_was_judged_against_is_no_longer_newest(
    tmp_path,
):
    serving = str(tmp_path / "serving")
    model = fake_model(str(tmp_path / "m"))
    with pytest.raises(pusher.ServingHeadMovedError):
        fake = os.path.join(serving, "50")
        fake_model(fake)
        open(os.path.join(fake, served_models.PUSH_COMPLETE_FILE), "w").close()
        pusher.publish(model, serving, expected_head=serving_lock.NO_HEAD)
    assert sorted(os.listdir(serving)) == ["50"]
    with pytest.raises(pusher.ServingHeadMovedError, match=r"^not pushed: .*/50 was pushed"):
        pusher.publish(model, serving, expected_head=40)
    pushed = pusher.publish(model, serving, now=100, expected_head=50)
    assert pushed == os.path.join(serving, "100")
    # A retry of the same push is not refused: it is the head itself.
    assert pusher.publish(model, serving, expected_head=50) == pushed


@pytest.mark.unit
def test_exclusive_create_lets_exactly_one_of_many_racers_win(tmp_path):
    path = str(tmp_path / "lock")
    barrier = threading.Barrier(8)
    won: list[bool] = []

    def race(i: int) -> None:
        barrier.wait()
        won.append(fileio.create_new(path, str(i).encode()))

    threads = [threading.Thread(target=race, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(won) == [False] * 7 + [True]
    assert sorted(os.listdir(tmp_path)) == ["lock"]


@pytest.mark.unit
def test_the_lease_waits_for_its_holder_expires_and_is_retaken_by_its_owner(tmp_path, monkeypatch):
    waiting = threading.Event()
    sleep = time.sleep
    monkeypatch.setattr(serving_lock.time, "sleep", lambda s: (waiting.set(), sleep(0.01)))
    serving = str(tmp_path / "serving")
    first = serving_lock.acquire(serving, "run-1")
    assert serving_lock.current(serving) == first
    # Another run waits until the holder gives it back.
    taken: list[serving_lock.Lease] = []
    waiter = threading.Thread(target=lambda: taken.append(serving_lock.acquire(serving, "run-2")))
    waiter.start()
    waiting.wait()
    assert not taken  # it found run-1's unexpired lease and waits
    assert not serving_lock.release(serving, "another token")
    assert serving_lock.release(serving, first.token)
    waiter.join()
    assert taken[0].owner == "run-2" and serving_lock.current(serving) == taken[0]
    # A retried step of the same run takes its lease back at once.
    again = serving_lock.acquire(serving, "run-2")
    assert again.token != taken[0].token and serving_lock.current(serving) == again
    # An expired lease (a killed run) is taken over.
    serving_lock.release(serving, again.token)
    serving_lock.acquire(serving, "killed-run", lease_seconds=-1)
    third = serving_lock.acquire(serving, "run-3")
    assert serving_lock.current(serving) == third
    # ... and so is one edited by hand into something unreadable.
    open(serving_lock.path_of(serving), "w").write("{")
    assert serving_lock.acquire(serving, "run-4").owner == "run-4"


def run_pusher(model_uri: str, blessing, serving: str):
    """ImagePusher's executor on one model and blessing; returns the PushedModel."""
    from google.protobuf import json_format
    from tfx.proto import pusher_pb2
    from tfx.types import standard_artifacts

    model = standard_artifacts.Model()
    model.uri = model_uri
    pushed = standard_artifacts.PushedModel()
    pushed.uri = model_uri + "-pushed"
    destination = pusher_pb2.PushDestination(
        filesystem=pusher_pb2.PushDestination.Filesystem(base_directory=serving)
    )
    pusher.Executor().Do(
        {"model": [model], "model_blessing": [blessing]},
        {"pushed_model": [pushed]},
        {"push_destination": json_format.MessageToJson(destination)},
    )
    return pushed


def blessing_for(tmp_path, blessed: bool, head: int, token: str):
    from tfx.types import standard_artifacts

    blessing = standard_artifacts.ModelBlessing()
    blessing.uri = str(tmp_path / "blessing")
    blessing.set_int_custom_property("blessed", int(blessed))
    blessing.set_int_custom_property(serving_lock.SERVING_HEAD_PROPERTY, head)
    blessing.set_string_custom_property(serving_lock.LEASE_PROPERTY, token)
    return blessing


@pytest.mark.unit
def test_the_pusher_refuses_when_another_push_came_first_and_gives_the_lease_back(tmp_path):
    serving = str(tmp_path / "serving")
    lease = serving_lock.acquire(serving, "run-1")
    # While run-1 was judged against nothing, another push landed (say its lease expired).
    other = pusher.publish(fake_model(str(tmp_path / "other" / "Format-Serving")), serving)
    fake_model(str(tmp_path / "m" / "Format-Serving"))
    refused = run_pusher(
        str(tmp_path / "m"),
        blessing_for(tmp_path, True, serving_lock.NO_HEAD, lease.token),
        serving,
    )
    assert refused.get_int_custom_property("pushed") == 0
    assert refused.get_string_custom_property(serving_lock.REFUSED_PROPERTY) == (
        f"not pushed: {other} was pushed after this model was judged against nothing pushed; "
        "the next retrain will be judged against it"
    )
    assert served_models.complete_versions(serving) == [int(os.path.basename(other))]
    assert serving_lock.current(serving) is None
    # Judged against the push that is the head: pushed.
    head = int(os.path.basename(other))
    lease = serving_lock.acquire(serving, "run-1")
    pushed = run_pusher(
        str(tmp_path / "m"), blessing_for(tmp_path, True, head, lease.token), serving
    )
    assert pushed.get_int_custom_property("pushed") == 1
    assert served_models.find(serving).model.version > head
    assert serving_lock.current(serving) is None
