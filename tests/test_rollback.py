"""`imgpipe rollback` (docs/serving-folder.md#rollback): the model servers are pointed at
the previous or a named kept version, verified, atomically and on record; the next
retrain is judged against what is served, a run judged before the rollback pushes
nothing, the next push is served, and a SIGKILL at any moment leaves models.config
naming a complete version."""

from __future__ import annotations

import os
import random
import re
import subprocess
import sys
import time

import pytest

from imgpipe.components.common.formats import (
    champion,
    model_config,
    rollback,
    served_models,
    serving_history,
)
from imgpipe.components.common.runtime import phases
from imgpipe.components.common.storage import serving_lock
from imgpipe.components.pusher import executor as pusher
from imgpipe.pipelines import cli
from tests.test_serving_folder import fake_model, run_pusher

VERSIONS = (100, 200, 300)


def pushes(tmp_path, versions=VERSIONS) -> str:
    """A serving folder with a real push (Pusher.publish, with manifests) per version."""
    serving = str(tmp_path / "serving")
    for version in versions:
        pusher.publish(fake_model(str(tmp_path / f"m{version}")), serving, now=version)
    return serving


def pointed_at(serving: str) -> tuple[int | None, int | None]:
    """(the version models.config names, the one kserve-models.config names)."""
    named = []
    for name in (model_config.MODEL_CONFIG_FILE, model_config.KSERVE_CONFIG_FILE):
        with open(os.path.join(serving, name)) as f:
            named.append(model_config.config_version(f.read()))
    return named[0], named[1]


def flip_a_byte(path: str, at: int = 5) -> None:
    """Damage only a checksum sees: the size stays."""
    with open(path, "r+b") as f:
        f.seek(at)
        byte = f.read(1)
        f.seek(at)
        f.write(bytes([byte[0] ^ 1]))


@pytest.mark.unit
def test_a_rollback_serves_the_previous_version_and_the_next_retrain_is_judged_against_it(
    tmp_path,
):
    serving = pushes(tmp_path)
    assert pointed_at(serving) == (300, 300)
    done = rollback.rollback(serving)
    assert (done.version, done.was, done.passed, done.warning) == (200, 300, (), "")
    assert pointed_at(serving) == (200, 200)
    # The KServe twin keeps its base path; models.config keeps the folder's.
    kserve = open(os.path.join(serving, model_config.KSERVE_CONFIG_FILE)).read()
    assert f'base_path: "{model_config.KSERVE_MODEL_DIR}"' in kserve
    assert f'base_path: "{serving}"' in open(os.path.join(serving, "models.config")).read()

    found = served_models.find(serving, checksums=True)
    assert (found.model.version, found.head, found.served) == (200, 300, 200)
    assert [(p.version, p.status) for p in found.passed] == [(300, served_models.NOT_SERVED)]
    assert found.note == f"{serving}/300: not served (models.config names 200); using 200"
    resolved = champion.resolve(serving)
    assert (resolved.champion_version, resolved.head, resolved.served) == (200, 300, 200)
    assert resolved.lookup().note == found.note == resolved.note

    decisions, problems = serving_history.read(serving)
    assert problems == []
    assert [(d.kind, d.model_version, d.served_version, d.reason) for d in decisions] == [
        (serving_history.ROLLBACK, 200, 200, "rolled back from 300")
    ]
    # Again: the one before that. No version folder changed.
    assert rollback.rollback(serving).version == 100
    assert served_models.complete_versions(serving) == [300, 200, 100]
    assert served_models.find(serving).note == (
        f"{serving}/300: not served (models.config names 100); "
        f"{serving}/200: not served (models.config names 100); using 100"
    )


@pytest.mark.unit
def test_a_rollback_to_a_named_version_and_what_cannot_be_rolled_back_to(tmp_path):
    serving = pushes(tmp_path)
    assert rollback.rollback(serving, to=100).version == 100
    assert pointed_at(serving) == (100, 100)
    with pytest.raises(ValueError) as older:
        rollback.rollback(serving)
    assert str(older.value) == (
        f"nothing to roll back to: {serving} keeps no version older than the served 100 "
        "(it keeps 300, 200, 100; --to VERSION serves one of them)"
    )
    # Forward again, to a version rolled back from; the same one twice rewrites the files.
    assert rollback.rollback(serving, to=300).version == 300
    again = rollback.rollback(serving, to=300)
    assert (again.version, again.was) == (300, 300)
    assert served_models.find(serving).note == ""
    with pytest.raises(ValueError, match=rf"^{serving} keeps no complete version 250; it keeps "):
        rollback.rollback(serving, to=250)

    # A damaged version is refused by name, with what is kept; the previous one skips it.
    flip_a_byte(os.path.join(serving, "200", "variables", "variables.data-00000-of-00001"))
    with pytest.raises(ValueError) as damaged:
        rollback.rollback(serving, to=200)
    assert re.fullmatch(
        rf"{serving}/200 cannot be served: damaged \(variables/variables.data-00000-of-00001: "
        rf"CRC-32C \w+ != \w+\); {serving} keeps 300, 200, 100 \(newest first\)",
        str(damaged.value),
    ), damaged.value
    done = rollback.rollback(serving)
    assert done.version == 100 and [p.version for p in done.passed] == [200]
    assert pointed_at(serving) == (100, 100)

    # One push: nothing to roll back to; none at all, the same.
    single = pushes(tmp_path / "single", (100,))
    with pytest.raises(ValueError, match=rf"^nothing to roll back to: {single} keeps only 100$"):
        rollback.rollback(single)
    with pytest.raises(ValueError, match="holds no complete push$"):
        rollback.rollback(str(tmp_path / "nothing"))


@pytest.mark.unit
def test_find_follows_models_config_and_says_when_it_cannot(tmp_path):
    serving = pushes(tmp_path)
    config = os.path.join(serving, model_config.MODEL_CONFIG_FILE)
    # A push stopped after PUSH_COMPLETE but before models.config: the one named serves.
    with open(config, "w") as f:
        f.write(model_config.model_config(serving, serving, 200))
    assert served_models.find(serving).model.version == 200
    # Naming no complete version, or unreadable: the newest sound push, said so.
    with open(config, "w") as f:
        f.write(model_config.model_config(serving, serving, 250))
    found = served_models.find(serving)
    assert (found.model.version, found.served) == (300, 250)
    assert found.note == (
        f"{config}: names 250, which is not a complete push, so the newest sound push is "
        "the champion; using 300"
    )
    with open(config, "w") as f:
        f.write("model_config_list { versions: x }")
    found = served_models.find(serving)
    assert found.model.version == 300 and found.served is None
    assert found.note.startswith(f"{config}: unreadable ({config}: the version is not an ")
    # None at all (pushes of a release before it): the newest sound push, as before.
    os.remove(config)
    assert served_models.find(serving).model.version == 300
    assert served_models.find(serving).note == ""


@pytest.mark.unit
def test_a_run_judged_before_a_rollback_pushes_nothing_and_the_next_push_is_served(tmp_path):
    serving = pushes(tmp_path, (100, 200))
    before = champion.resolve(serving)  # a run begins: judged against 200
    rollback.rollback(serving)
    model = fake_model(str(tmp_path / "new" / "Format-Serving"))
    with pytest.raises(
        pusher.ServingHeadMovedError,
        match=rf"^not pushed: {serving} was rolled back to 100 after this model was judged "
        "against 200; the next retrain will be judged against it$",
    ):
        pusher.publish(model, serving, expected_head=before.head, expected_served=before.served)
    assert served_models.complete_versions(serving) == [200, 100]

    # Through the executor, as the Evaluator's blessing hands it over: the one line is
    # the PushedModel's, and the lease is given back.
    lease = serving_lock.acquire(serving, "run-1")
    blessing = _blessing(tmp_path, before.head, before.served, lease.token)
    refused = run_pusher(str(tmp_path / "new"), blessing, serving)
    assert refused.get_int_custom_property("pushed") == 0
    assert refused.get_string_custom_property(serving_lock.REFUSED_PROPERTY).startswith(
        f"not pushed: {serving} was rolled back to 100 after this model was judged against 200"
    )
    assert serving_lock.current(serving) is None

    # The next run is judged against 100, and its push is served.
    after = champion.resolve(serving)
    assert (after.champion_version, after.head, after.served) == (100, 200, 100)
    lease = serving_lock.acquire(serving, "run-2")
    blessing = _blessing(tmp_path, after.head, after.served, lease.token)
    assert run_pusher(str(tmp_path / "new"), blessing, serving).get_int_custom_property("pushed")
    newest = served_models.complete_versions(serving)[0]
    assert newest > 200 and pointed_at(serving) == (newest, newest)
    found = served_models.find(serving)
    assert (found.model.version, found.passed, found.note) == (newest, (), "")


@pytest.mark.unit
def test_a_rollback_while_a_push_copies_wins(tmp_path):
    serving = pushes(tmp_path, (100, 200))

    def files_rolled_back_meanwhile(version: int, path: str) -> dict[str, bytes]:
        rollback.rollback(serving)  # an operator, while the push copies
        return {}

    with pytest.raises(pusher.ServingHeadMovedError, match="was rolled back to 100 after"):
        pusher.publish(
            fake_model(str(tmp_path / "new")),
            serving,
            now=300,
            generated=files_rolled_back_meanwhile,
        )
    # The push is whole but not served, and the next retrain says so.
    assert served_models.complete_versions(serving) == [300, 200, 100]
    assert pointed_at(serving) == (100, 100)
    assert [p.status for p in served_models.find(serving).passed] == [served_models.NOT_SERVED] * 2


@pytest.mark.unit
def test_a_retried_push_is_pointed_at_again_unless_it_was_rolled_back_from(tmp_path):
    serving = pushes(tmp_path, (100,))
    model = fake_model(str(tmp_path / "m200"))
    pushed = pusher.publish(model, serving, now=200)
    model_config.write(serving, 100)  # as a push killed before its pointers leaves them
    assert pusher.publish(model, serving) == pushed  # the retry points at it
    assert pointed_at(serving) == (200, 200)
    rollback.rollback(serving)
    with pytest.raises(
        pusher.ServingHeadMovedError,
        match=rf"^not pushed: {serving} was rolled back to 100 after {pushed} was pushed; ",
    ):
        pusher.publish(model, serving)
    assert pointed_at(serving) == (100, 100)


def _blessing(tmp_path, head: int | None, served: int | None, token: str):
    from tfx.types import standard_artifacts

    blessing = standard_artifacts.ModelBlessing()
    blessing.uri = str(tmp_path / "blessing")
    blessing.set_int_custom_property("blessed", 1)
    for name, value in (
        (serving_lock.SERVING_HEAD_PROPERTY, head),
        (serving_lock.SERVED_PROPERTY, served),
    ):
        blessing.set_int_custom_property(name, serving_lock.NO_HEAD if value is None else value)
    blessing.set_string_custom_property(serving_lock.LEASE_PROPERTY, token)
    return blessing


@pytest.mark.unit
def test_the_command_says_what_it_did_in_one_line_and_errors_in_one_line(tmp_path, capsys):
    serving = pushes(tmp_path, (100, 200))
    assert cli.main(["rollback", "--serving-dir", serving]) == 0
    out, err = capsys.readouterr()
    assert out.splitlines() == [
        f"rolled back {serving}: serving 100 (was 200). TF Serving loads it at its next read "
        "of models.config (--model_config_file_poll_wait_seconds); KServe: restart the "
        "predictor"
    ]
    assert cli.main(["rollback", "--serving-dir", serving]) == 1
    out, err = capsys.readouterr()
    assert err.splitlines() == [
        f"imgpipe: error: nothing to roll back to: {serving} keeps no version older than the "
        "served 100 (it keeps 200, 100; --to VERSION serves one of them)"
    ]
    assert cli.main(["rollback", "--serving-dir", serving, "--to", "200"]) == 0
    assert "serving 200 (was 100)" in capsys.readouterr().out
    assert cli.main(["rollback", "--serving-dir", serving, "--to", "7"]) == 1
    assert capsys.readouterr().err.startswith(
        f"imgpipe: error: {serving} keeps no complete version 7; it keeps 200, 100"
    )


# A rollback in its own process, killed: once at each phase, and at random moments of
# rollbacks back and forth in a loop.
_ROLLBACK = (
    "import sys\n"
    "from imgpipe.components.common.formats import rollback\n"
    "serving, loop = sys.argv[1], sys.argv[2] == 'loop'\n"
    "print('ready', flush=True)\n"
    "rollback.rollback(serving)\n"
    "while loop:\n"
    "    rollback.rollback(serving, to=300)\n"
    "    rollback.rollback(serving)\n"
)


def _assert_serves_a_whole_version(serving: str) -> int:
    served, _ = pointed_at(serving)
    assert served in (200, 300)
    assert served_models.damage(os.path.join(serving, str(served)), checksums=True) is None
    found = served_models.find(serving, checksums=True)
    assert found.model is not None and found.model.version == served
    return served


@pytest.mark.unit
@pytest.mark.parametrize("phase", phases.POINTER_PHASES)
def test_a_rollback_killed_at_each_phase_leaves_a_whole_version_served(tmp_path, phase):
    serving = pushes(tmp_path)
    env = {**os.environ, phases.STOP_AT_ENV: phase}
    done = subprocess.run(
        [sys.executable, "-c", _ROLLBACK, serving, "once"], env=env, capture_output=True
    )
    assert done.returncode == -9, done.stderr.decode()[-2000:]
    served = _assert_serves_a_whole_version(serving)
    assert served == (200 if phase == phases.POINTED else 300)
    # Run again, it completes: both files name the version.
    assert rollback.rollback(serving, to=200).version == 200
    assert pointed_at(serving) == (200, 200)


@pytest.mark.unit
def test_a_rollback_killed_at_random_moments_leaves_a_whole_version_served(tmp_path):
    seen = set()
    for round_ in range(4):
        serving = pushes(tmp_path / str(round_))
        process = subprocess.Popen(
            [sys.executable, "-c", _ROLLBACK, serving, "loop"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        assert process.stdout is not None
        assert process.stdout.readline() == b"ready\n"
        time.sleep(random.Random(round_).uniform(0.0, 0.3))
        process.kill()
        process.wait()
        seen.add(_assert_serves_a_whole_version(serving))
    assert seen <= {200, 300}
