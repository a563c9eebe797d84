"""The ChampionResolver (components/champion/): the serving folder read once, checked
first, its lease taken and handed on, the champion recorded as one typed artifact."""

from __future__ import annotations

import os

import pytest

from imgpipe.components.common.formats import champion, served_models
from imgpipe.components.common.storage import serving_lock
from tests import trainer_helpers as th
from tests.test_serving_folder import fake_model, truncate

pytestmark = pytest.mark.unit


def test_the_champion_is_read_once_with_its_head_and_what_was_passed_over(tmp_path):
    from imgpipe.components.pusher.executor import publish

    serving = str(tmp_path / "serving")
    older = publish(fake_model(str(tmp_path / "m1")), serving, now=100)
    newer = publish(fake_model(str(tmp_path / "m2"), ("a", "b", "c")), serving, now=200)
    truncate(os.path.join(newer, "saved_model.pb"))
    artifact = th.resolve_champion(str(tmp_path / "run"), serving)
    resolved = champion.read(artifact.uri)
    assert (resolved.status, resolved.champion_version, resolved.path) == ("found", 100, older)
    assert resolved.labels == ("a", "b") and resolved.head == 200
    assert resolved.note.startswith(f"{newer}: damaged (saved_model.pb: size 1 != ")
    assert artifact.get_int_custom_property("champion_version") == 100
    assert artifact.get_int_custom_property("serving_head") == 200
    assert resolved.describe().startswith(f"100 ({older}); {newer}: damaged")
    # The run holds the lease, handed on to its next step.
    held = serving_lock.current(serving)
    assert held.token == resolved.lease_token and not held.working
    # A retried resolver of the same run takes its own lease back at once.
    again = champion.read(th.resolve_champion(str(tmp_path / "run"), serving).uri)
    assert again.lease_token != resolved.lease_token
    assert serving_lock.current(serving).token == again.lease_token
    th.release_lease(th.resolve_champion(str(tmp_path / "run"), serving))
    assert served_models.complete_versions(serving) == [200, 100]


def test_no_serving_folder_means_no_champion_and_no_lease(tmp_path):
    resolved = champion.read(th.resolve_champion(str(tmp_path / "run"), "").uri)
    assert resolved.status == champion.NOT_SET and resolved.lease_token == ""
    empty = str(tmp_path / "empty")
    resolved = champion.read(th.resolve_champion(str(tmp_path / "run2"), empty).uri)
    assert resolved.status == champion.NONE and resolved.head is None
    assert resolved.reason == f"no model has been pushed to {empty} yet"
    th.release_lease(th.resolve_champion(str(tmp_path / "run2"), empty))


def test_a_serving_folder_that_cannot_be_written_stops_the_run_first(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    serving = str(blocker / "serving")
    with pytest.raises(serving_lock.ServingDirError) as raised:
        th.resolve_champion(str(tmp_path / "run"), serving)
    message = str(raised.value)
    assert message.startswith(f"the serving directory {serving} cannot be written (")
    assert message.endswith("or point --serving-dir (serving_dir) elsewhere")
    assert "\n" not in message
