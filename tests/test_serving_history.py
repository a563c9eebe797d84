"""What each run decided (docs/serving-folder.md, "What each run decided"): the records in
<serving_dir>/.history/, read back oldest first with damaged ones named; the Pusher's
record of a push and of both refusals; and `imgpipe history` as text, JSON and an HTML
chart."""

from __future__ import annotations

import json
import os
from html.parser import HTMLParser

import pytest

from imgpipe.components.common.formats import model_config, reference_sets, served_models
from imgpipe.components.common.formats import serving_history as history
from imgpipe.components.common.storage import serving_lock
from imgpipe.components.evaluator import evaluation as ev
from imgpipe.components.pusher import executor as pusher
from imgpipe.pipelines import cli
from tests.test_serving_folder import blessing_for, fake_model, run_pusher

T0 = 1764000000.0  # 2025-11-24T16:00:00Z


def four_decisions(serving: str) -> list[history.Decision]:
    """One decision of each kind, recorded newest first: the reader sorts them."""
    decisions = [
        history.Decision(T0, history.PUSHED, 1, 1764000000, 1764000000, 0.8, "blessed: floor"),
        history.Decision(T0 + 3600, history.REFUSED, 2, None, 1764000000, 0.8, "not blessed"),
        history.Decision(T0 + 7200, history.STOPPED, 3, None, 1764000000, None, "data gate"),
        history.Decision(T0 + 9000, history.ROLLBACK, None, 1763000000, 1763000000, None, "op"),
    ]
    for decision in reversed(decisions):
        history.record(serving, decision)
    return decisions


@pytest.mark.unit
def test_decisions_round_trip_oldest_first_and_a_damaged_record_is_named(tmp_path):
    serving = str(tmp_path / "serving")
    assert history.read(serving) == ([], [])
    decisions = four_decisions(serving)
    names = sorted(os.listdir(os.path.join(serving, history.HISTORY_DIR)))
    assert names[0] == "01764000000000000000-pushed.json"
    assert [n.rsplit("-", 1)[1] for n in names] == [
        "pushed.json",
        "refused.json",
        "stopped.json",
        "rollback.json",
    ]
    assert history.read(serving) == (decisions, [])
    with open(os.path.join(serving, history.HISTORY_DIR, names[0])) as f:
        assert json.load(f)["version"] == history.VERSION

    # A record cut short, one of another schema, one of no known kind, and a write that
    # never finished (a temporary file): named and passed over, or ignored.
    folder = os.path.join(serving, history.HISTORY_DIR)
    with open(os.path.join(folder, names[1]), "r+b") as f:
        f.truncate(20)
    record = json.load(open(os.path.join(folder, names[2])))
    json.dump({**record, "version": 99}, open(os.path.join(folder, names[2]), "w"))
    json.dump({**record, "kind": "deleted"}, open(os.path.join(folder, "9-deleted.json"), "w"))
    open(os.path.join(folder, "02-pushed.json.tmp"), "w").write("{")
    found, problems = history.read(serving)
    assert found == [decisions[0], decisions[3]]
    assert len(problems) == 3
    assert problems[0].startswith(f"{folder}/{names[1]}: passed over, unreadable: ")
    assert "is not JSON" in problems[0]
    assert "schema version 99" in problems[1]
    assert problems[2] == f"{folder}/9-deleted.json: passed over, unknown decision kind 'deleted'"

    with pytest.raises(ValueError, match="decision kind 'deleted' is not one of"):
        history.record(serving, history.Decision(T0, "deleted"))


@pytest.mark.unit
def test_a_reason_is_kept_in_a_few_words():
    reason = (
        "blessed: accuracy 0.9500 vs floor 0.4000 (threshold 0.4000; always answering 'a' "
        "scores 0.3333, plus margin 0.0500 (default); significance 0.05); not worse than "
        "champion 7 (.../8: damaged) on new_split"
    )
    assert history.brief(reason) == (
        "blessed: accuracy 0.9500 vs floor 0.4000; not worse than champion 7 on new_split"
    )
    assert history.brief("x " * 200).endswith("...") and len(history.brief("x " * 200)) == 160


def write_evaluation(
    blessing_uri: str, blessed: bool, champion_version: int | None, reason: str
) -> None:
    """An evaluation.json beside the blessing, as the Evaluator leaves it: the two models
    on the new split and on the champion's reference set."""

    def on(correct: int) -> ev.ModelMetrics:
        return ev.ModelMetrics.of((ev.ClassMetrics("a", 10, correct, 10),))

    comparisons = (
        ev.Comparison(reference_sets.NEW_SPLIT, "", True, "", ("a",), on(9), on(8)),
        ev.Comparison(reference_sets.CHAMPION_REFERENCE, "", True, "", ("a",), on(7), on(6)),
    )
    champion = ev.Champion(ev.COMPARED, "", None, champion_version, on(8))
    evaluation = ev.Evaluation(
        "eval", "a", 1.0, 0.5, on(9), champion, ev.Decision(blessed, reason, ()), comparisons
    )
    ev.write(blessing_uri, evaluation)


@pytest.mark.unit
def test_the_pusher_records_a_refusal_a_push_and_the_compare_and_swap_refusals(tmp_path):
    serving = str(tmp_path / "serving")
    first = int(os.path.basename(pusher.publish(fake_model(str(tmp_path / "c" / "m")), serving)))
    fake_model(str(tmp_path / "m" / "Format-Serving"))

    # Not blessed: the champion keeps serving, with its accuracy on its reference set.
    refused = blessing_for(tmp_path, False, first, "")
    refused.set_int_custom_property("span", 5)
    write_evaluation(refused.uri, False, first, "not blessed: on champion_reference (10): worse")
    run_pusher(str(tmp_path / "m"), refused, serving)
    (decision,), problems = history.read(serving)
    assert problems == []
    assert (decision.kind, decision.span, decision.model_version) == (history.REFUSED, 5, None)
    assert (decision.served_version, decision.reference_accuracy) == (first, 0.6)
    assert decision.reason == "not blessed: on champion_reference: worse"

    # Blessed and pushed: the new model serves, with its accuracy on that set.
    lease = serving_lock.acquire(serving, "run-2")
    blessed = blessing_for(tmp_path, True, first, lease.token)
    blessed.set_int_custom_property("span", 6)
    write_evaluation(blessed.uri, True, first, "blessed: accuracy 0.9 vs floor 0.5 (...)")
    pushed = run_pusher(str(tmp_path / "m"), blessed, serving)
    version = int(pushed.get_string_custom_property("pushed_version"))
    decision = history.read(serving)[0][-1]
    assert (decision.kind, decision.span) == (history.PUSHED, 6)
    assert decision.model_version == decision.served_version == version > first
    assert decision.reference_accuracy == 0.7
    assert decision.reason == "blessed: accuracy 0.9 vs floor 0.5"

    # Judged against `first`, but `version` came since: refused, and `version` serves.
    lease = serving_lock.acquire(serving, "run-3")
    fake_model(str(tmp_path / "m3" / "Format-Serving"))
    late = blessing_for(tmp_path, True, first, lease.token)
    run_pusher(str(tmp_path / "m3"), late, serving)
    decision = history.read(serving)[0][-1]
    assert (decision.kind, decision.span, decision.served_version) == (
        history.REFUSED,
        None,
        version,
    )
    assert decision.reason.startswith(f"not pushed: {serving}/{version} was pushed after")
    assert served_models.complete_versions(serving)[0] == version

    # Rolled back to `first` after this model was judged against `version`: refused, and
    # `first` serves.
    model_config.write(serving, first)
    lease = serving_lock.acquire(serving, "run-4")
    fake_model(str(tmp_path / "m4" / "Format-Serving"))
    judged = blessing_for(tmp_path, True, version, lease.token)
    judged.set_int_custom_property(serving_lock.SERVED_PROPERTY, version)
    run_pusher(str(tmp_path / "m4"), judged, serving)
    decision = history.read(serving)[0][-1]
    assert (decision.kind, decision.served_version) == (history.REFUSED, first)
    assert decision.reason.startswith(f"not pushed: {serving} was rolled back to {first} ")


@pytest.mark.unit
def test_a_history_that_cannot_be_written_never_fails_the_push(tmp_path):
    serving = str(tmp_path / "serving")
    os.makedirs(serving)
    open(os.path.join(serving, history.HISTORY_DIR), "w").close()  # a file in its way
    fake_model(str(tmp_path / "m" / "Format-Serving"))
    pushed = run_pusher(str(tmp_path / "m"), blessing_for(tmp_path, True, -1, ""), serving)
    assert pushed.get_int_custom_property("pushed") == 1
    with pytest.raises(OSError):
        history.record(serving, history.Decision(T0, history.PUSHED))


class _Page(HTMLParser):
    """The tags of a page, the decisions' markers and their tooltips."""

    def __init__(self) -> None:
        super().__init__()
        self.tags: list[str] = []
        self.kinds: list[str] = []
        self.titles: list[str] = []
        self.links: list[str] = []
        self._in_title = False

    def handle_starttag(self, tag, attrs):
        values = dict(attrs)
        self.tags.append(tag)
        if tag == "g" and values.get("class") == "decision":
            self.kinds.append(values["data-kind"])
        self.links += [v for k, v in attrs if k in ("href", "src", "xlink:href") and v]
        self._in_title = tag == "title"

    def handle_endtag(self, tag):
        self._in_title = False

    def handle_data(self, data):
        if self._in_title and self.tags[-1] == "title" and "svg" in self.tags:
            self.titles.append(data)


@pytest.mark.unit
def test_history_prints_a_line_per_decision_json_and_a_chart(tmp_path, capsys):
    serving = str(tmp_path / "serving")
    decisions = four_decisions(serving)

    assert cli.main(["history", "--serving-dir", serving]) == 0
    captured = capsys.readouterr()
    lines = captured.out.splitlines()
    assert lines[0].split() == "span time (UTC) decision version served ref.acc reason".split()
    assert (
        lines[1].split()
        == "1 2025-11-24T16:00Z pushed 1764000000 1764000000 0.8000 blessed: floor".split()
    )
    assert lines[3].split() == "3 2025-11-24T18:00Z stopped - 1764000000 - data gate".split()
    assert lines[4].split() == "- 2025-11-24T18:30Z rollback 1763000000 1763000000 - op".split()
    assert len(lines) == 5 and captured.err == ""

    # A damaged record: a warning line, the rest still shown.
    folder = os.path.join(serving, history.HISTORY_DIR)
    damaged = os.path.join(folder, sorted(os.listdir(folder))[1])
    open(damaged, "w").write("{")
    assert cli.main(["history", "--serving-dir", serving, "--json"]) == 0
    captured = capsys.readouterr()
    document = json.loads(captured.out)
    assert [d["kind"] for d in document["decisions"]] == ["pushed", "stopped", "rollback"]
    assert document["decisions"][0]["model_version"] == 1764000000
    assert len(document["problems"]) == 1 and damaged in document["problems"][0]
    assert captured.err.splitlines() == [f"warning: {document['problems'][0]}"]

    # The chart: one marker per decision, each with its line as tooltip; nothing loaded.
    os.remove(damaged)
    history.record(serving, decisions[1])
    page_path = str(tmp_path / "out" / "history.html")
    assert cli.main(["history", "--serving-dir", serving, "--html", page_path]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[-1] == f"chart: {page_path}"
    page = _Page()
    page.feed(open(page_path).read())
    assert page.tags.count("svg") == 1 and "script" not in page.tags and page.links == []
    assert page.kinds == ["pushed", "refused", "stopped", "rollback"]
    assert len(page.titles) == 4 and page.titles[0].split()[2] == "pushed"
    assert {"circle", "polygon", "path", "pre"} <= set(page.tags)
    assert out.splitlines()[1] in open(page_path).read()  # the table below the chart


@pytest.mark.unit
def test_history_says_when_the_schedule_has_stalled(tmp_path, capsys):
    serving = str(tmp_path / "serving")
    four_decisions(serving)  # ends in a rollback: nothing since it
    refused = "not blessed: significantly worse than champion 1763000000 on champion_reference"
    after = [
        history.Decision(T0 + 10_000, history.REFUSED, 4, None, 1763000000, 0.8, refused),
        history.Decision(T0 + 20_000, history.STOPPED, 5, None, 1763000000, None, "data gate"),
        # A rerun of a span is the same span.
        history.Decision(T0 + 25_000, history.STOPPED, 5, None, 1763000000, None, "data gate"),
    ]
    for decision in after:
        history.record(serving, decision)
    assert history.stall(history.read(serving)[0]) is None  # two spans: not yet
    history.record(
        serving, history.Decision(T0 + 30_000, history.REFUSED, 6, None, 1763000000, 0.8, refused)
    )
    assert cli.main(["history", "--serving-dir", serving]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == (
        "stalled: 3 spans since the last push, none pushed (spans 4-6: 2 refused, 1 stopped "
        f"by the data gate, 0 failed); version 1763000000 serves; the newest: {refused}"
    )
    assert cli.main(["history", "--serving-dir", serving, "--json"]) == 0
    stalled = json.loads(capsys.readouterr().out)["stalled"]
    assert stalled["spans"] == [4, 5, 6] and stalled["refused"] == 2
    # The summary of a run that pushed nothing says it too.
    from imgpipe.pipelines import run_summary

    (line,) = run_summary.stall_lines(serving)
    assert line.startswith("stalled              3 spans since the last push, none pushed")
    # ... and so does the chart's page, above the table.
    page_path = str(tmp_path / "history.html")
    assert cli.main(["history", "--serving-dir", serving, "--html", page_path]) == 0
    assert "<li>stalled: 3 spans since the last push" in open(page_path).read()
    # A push ends it; a schedule that fires with nothing new since refuses its twin each
    # time, on the pushed span: that is not a stall.
    history.record(
        serving, history.Decision(T0 + 40_000, history.PUSHED, 7, 1764040000, 1764040000, 0.9)
    )
    nothing_new = "not blessed: nothing new: trained on the same data"
    for hour in range(1, 5):
        history.record(
            serving,
            history.Decision(
                T0 + 40_000 + 3600 * hour, history.REFUSED, 7, None, 1764040000, 0.9, nothing_new
            ),
        )
    assert history.stall(history.read(serving)[0]) is None
    assert run_summary.stall_lines(serving) == []
    # Runs that fail decide nothing, but spans go by: a schedule failing every day stalls.
    failed = "Trainer failed: /data/span-9/cat/a.jpg: Permission denied"
    for span in (8, 9, 10):
        history.record(
            serving,
            history.Decision(
                T0 + 60_000 + span, history.FAILED, span, None, 1764040000, None, failed
            ),
        )
    stalled = history.stall(history.read(serving)[0])
    assert stalled is not None and stalled.failed == 3 and stalled.refused == 0
    assert stalled.describe().startswith(
        "stalled: 3 spans since the last push, none pushed (spans 8-10: 0 refused, 0 stopped by "
        "the data gate, 3 failed); version 1764040000 serves"
    )
    assert cli.main(["history", "--serving-dir", serving]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[-2].split()[:3] == ["10", out[-2].split()[1], "failed"] and failed in out[-2]


@pytest.mark.unit
def test_history_of_a_missing_folder_is_one_line_and_of_an_empty_one_says_so(tmp_path, capsys):
    missing = str(tmp_path / "nowhere")
    assert cli.main(["history", "--serving-dir", missing]) == 1
    captured = capsys.readouterr()
    assert captured.err.splitlines() == [
        f"imgpipe: error: --serving-dir {missing}: no such serving folder; give the folder "
        "the Pusher pushes to (serving_dir)"
    ]
    assert captured.out == ""
    empty = str(tmp_path / "serving")
    os.makedirs(empty)
    assert cli.main(["history", "--serving-dir", empty]) == 0
    assert capsys.readouterr().out == f"no decisions recorded in {empty} yet\n"


@pytest.mark.unit
def test_a_run_that_failed_before_its_first_step_is_recorded_with_what_is_known(tmp_path):
    from imgpipe.pipelines import config as cfg
    from imgpipe.pipelines import local_runner

    serving = str(tmp_path / "serving")
    config = cfg.from_dict(
        {
            "data_root": str(tmp_path / "images"),
            "serving_dir": serving,
            "metadata_path": str(tmp_path / "no-such-folder" / "metadata.sqlite"),
            "span": 4,
        }
    )
    local_runner.record_failure(config, "run-1", "metadata_path: not a local file")
    (decision,), problems = history.read(serving)
    assert problems == []
    assert (decision.kind, decision.span, decision.run_id) == (history.FAILED, 4, "run-1")
    assert decision.reason == "metadata_path: not a local file"
    # The same failure again keeps the first record; another one is recorded.
    local_runner.record_failure(config, "run-2", "metadata_path: not a local file")
    assert [d.run_id for d in history.read(serving)[0]] == ["run-1"]
    local_runner.record_failure(config, "run-3", "another error")
    assert [d.run_id for d in history.read(serving)[0]] == ["run-1", "run-3"]
    assert history.newest(serving) == history.read(serving)[0][-1]
    # Without a serving folder there is no history to write to.
    local_runner.record_failure(cfg.from_dict({"data_root": "x"}), "run-2", "boom")
