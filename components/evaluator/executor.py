"""ImageEvaluator's executor: validates, finds the champion, scores both models on
every evaluation set (the new eval split, the champion's reference set, the eval splits
of the earlier spans the candidate was trained on, the golden set), decides, and keeps
the new split as the reference set of a blessed model."""

from __future__ import annotations

import contextlib
import dataclasses
import os
import posixpath
import tempfile
from collections.abc import Sequence
from typing import Any

import tensorflow as tf
from absl import logging
from tfx import types
from tfx.dsl.components.base import base_executor
from tfx.types import artifact_utils
from tfx.utils import path_utils

from imgpipe.components.common.formats import champion as champion_lib
from imgpipe.components.common.formats import manifest, reference_sets, served_models
from imgpipe.components.common.formats.artifact_types import SPAN_PROPERTY, span_of
from imgpipe.components.common.formats.reference_sets import ReferenceSet
from imgpipe.components.common.formats.spans import AdmittedSpan
from imgpipe.components.common.runtime import config_loader
from imgpipe.components.common.storage import disk_full, fileio, serving_lock, staging
from imgpipe.components.evaluator import blessing as blessing_lib
from imgpipe.components.evaluator import evaluation as ev
from imgpipe.components.evaluator import paired, references, report, scoring, spec
from imgpipe.components.evaluator.config import EvaluatorConfig

# What reading a model or an evaluation set can raise when it is missing or damaged.
READ_ERRORS = (OSError, ValueError, KeyError, tf.errors.OpError)


def config_from_properties(exec_properties: dict[str, Any]) -> EvaluatorConfig:
    """The blessing rules, the tolerance property applied.

    Raises:
      ValueError: a bad setting, named.
    """
    config = config_loader.from_json(EvaluatorConfig, exec_properties[spec.EVALUATOR_CONFIG_KEY])
    tolerance = exec_properties.get(spec.TOLERANCE_KEY)
    if tolerance is not None:
        config = dataclasses.replace(config, tolerance=float(tolerance))
    config.validate()
    return config


def find_champion(
    config: EvaluatorConfig, lookup: served_models.Lookup, labels: list[str]
) -> tuple[ev.Champion, tuple[str, ...]]:
    """The champion to compare with, or why there is none (metrics are filled later),
    and its class names; its note names every damaged push passed over
    (served_models.Lookup.note)."""
    if not config.compare_with_champion:
        return ev.Champion(ev.NOT_COMPARED, "evaluator.compare_with_champion is false"), ()
    served = lookup.model
    if served is None:
        if lookup.passed:
            return ev.Champion(ev.UNREADABLE, lookup.note), ()
        note = f"no complete push in {lookup.serving_dir or '(none set)'} yet"
        return ev.Champion(ev.NO_CHAMPION, note), ()
    theirs = list(served.labels)
    if not scoring.shared_classes(labels, theirs):
        return ev.Champion(
            ev.LABELS_DIFFER,
            _notes(
                lookup.note,
                f"the champion has labels {theirs}, the candidate {labels}: no class in "
                "common, so nothing to compare",
            ),
            served.path,
            served.version,
        ), served.labels
    added = tuple(name for name in labels if name not in theirs)
    removed = tuple(name for name in theirs if name not in labels)
    note = _notes(
        lookup.note,
        f"classes added {list(added)}, removed {list(removed)} since champion "
        f"{served.version}: compared on the classes both know"
        if added or removed
        else "",
    )
    champion = ev.Champion(ev.COMPARED, note, served.path, served.version, None, added, removed)
    return champion, served.labels


def _notes(*notes: str) -> str:
    return "; ".join(note for note in notes if note)


def other_sets(
    config: EvaluatorConfig, champion: ev.Champion
) -> tuple[list[ReferenceSet], list[ev.Comparison]]:
    """The champion's reference set and the golden set, and those that are missing or
    damaged, as skipped comparisons that say why."""
    found: list[ReferenceSet] = []
    skipped: list[ev.Comparison] = []
    if champion.status == ev.COMPARED and champion.path:
        where = posixpath.join(champion.path, served_models.REFERENCE_ASSET)
        try:
            found.append(reference_sets.read(where))
        except FileNotFoundError:
            skipped.append(
                ev.Comparison(
                    reference_sets.CHAMPION_REFERENCE,
                    where,
                    False,
                    f"skipped: champion {champion.version} has no reference set (pushed "
                    "before reference sets were kept)",
                )
            )
        except READ_ERRORS as e:
            skipped.append(
                ev.Comparison(
                    reference_sets.CHAMPION_REFERENCE,
                    where,
                    False,
                    f"skipped: champion {champion.version}'s reference set is damaged: {e}",
                )
            )
    if config.golden_examples:
        try:
            found.append(reference_sets.from_golden(config.golden_examples))
        except READ_ERRORS as e:
            skipped.append(
                ev.Comparison(
                    reference_sets.GOLDEN,
                    config.golden_examples,
                    False,
                    f"skipped: the golden set is unreadable: {e}",
                )
            )
    return found, skipped


# Without a record of the spans the candidate was trained on (a model trained before the
# Trainer kept one), the newest admitted spans before this one are judged on, this many:
# the Trainer's default window (trainer.spans 4) less this span. Any of them is unseen,
# whatever the window was: no eval split is ever trained on.
FALLBACK_EARLIER_SPANS = 3


def earlier_spans(
    resolved: champion_lib.Resolved | None, candidate_dir: str, span: int | None
) -> tuple[tuple[AdmittedSpan, ...], tuple[ev.Comparison, ...]]:
    """The earlier spans the candidate was trained on, newest first, from its training
    record (served_models.TRAINING_FILE `spans`) and the spans admitted when the run
    began (the run's champion artifact); a span of the record no longer admitted is a
    skipped comparison that says so. Without a record, the FALLBACK_EARLIER_SPANS newest
    admitted spans before this one, passing over those admitted by an acceptance that no
    pushed model was trained on (as the Trainer's window does). None when the span is
    unknown or nothing was resolved."""
    if span is None or resolved is None:
        return (), ()
    admitted = {s.span: s for s in resolved.admitted}
    trained = served_models.training_of(candidate_dir).get("spans")
    if isinstance(trained, list):
        earlier = [s for s in trained if isinstance(s, int) and s != span]
        gone = tuple(
            ev.Comparison(
                reference_sets.EARLIER_SPANS,
                "",
                False,
                f"skipped: span {s}, trained on, is no longer admitted (its record is gone "
                "from the serving folder), so where its eval split is is not known",
            )
            for s in earlier
            if s not in admitted
        )
        return tuple(admitted[s] for s in earlier if s in admitted), gone
    model = resolved.model
    served = set(model.training().get("spans", [])) if model is not None else set()
    before = sorted(
        (s for s in resolved.admitted if s.span < span and (not s.accepted or s.span in served)),
        key=lambda s: -s.span,
    )
    return tuple(before[:FALLBACK_EARLIER_SPANS]), ()


def earlier_splits(
    spans: Sequence[AdmittedSpan], eval_split: str
) -> tuple[list[tuple[int, ReferenceSet]], list[ev.Comparison]]:
    """Each earlier span's eval split, and a skipped comparison that says why for each
    span whose Examples are gone or cannot be read."""
    found: list[tuple[int, ReferenceSet]] = []
    skipped: list[ev.Comparison] = []
    for admitted in spans:
        uri = admitted.examples_uri
        try:
            if not fileio.exists(uri):
                raise FileNotFoundError(f"its examples {uri} are gone (deleted)")
            manifest.verify(uri)
            split = reference_sets.from_split(uri, eval_split, reference_sets.EARLIER_SPANS)
        except READ_ERRORS as e:
            why = " ".join(str(e).split())[:300]
            skipped.append(
                ev.Comparison(
                    reference_sets.EARLIER_SPANS,
                    uri,
                    False,
                    f"skipped: span {admitted.span}'s eval split cannot be read: {why}",
                )
            )
            continue
        found.append((admitted.span, split))
    return found, skipped


def _merged_earlier(
    earlier: Sequence[tuple[int, ReferenceSet]],
    seen: Sequence[ReferenceSet],
    labels: list[str],
    folder: str,
) -> tuple[ReferenceSet | None, str, list[ev.Comparison]]:
    """The earlier spans' eval splits as one set less the images `seen` holds
    (references.window_set), the note its comparison carries, and a skipped comparison
    for each span that could not be read, or for the set when no image is left."""
    os.makedirs(folder, exist_ok=True)
    merged = references.window_set(earlier, seen, labels, folder)
    skipped = [
        ev.Comparison(
            reference_sets.EARLIER_SPANS,
            uri,
            False,
            f"skipped: span {span}'s eval split cannot be read: {why}",
        )
        for span, uri, why in merged.unreadable
    ]
    spans = ", ".join(str(s) for s in merged.spans)
    in_sets = " or ".join(s.name for s in seen)
    if merged.reference is None:
        if merged.spans:
            skipped.append(
                ev.Comparison(
                    reference_sets.EARLIER_SPANS,
                    ", ".join(split.uri for span, split in earlier if span in merged.spans),
                    False,
                    f"skipped: each of the {merged.already_seen} eval images of spans {spans} "
                    f"is in {in_sets} already",
                )
            )
        return None, "", skipped
    note = f"the eval splits of spans {spans}" + (
        f"; {merged.already_seen} of their images left out, in {in_sets} already"
        if merged.already_seen
        else ""
    )
    return merged.reference, note, skipped


def _behind_note(left_out: dict[int, int], baseline: str) -> str:
    """Why the images of spans the window has moved past are not counted."""
    if not left_out:
        return ""
    spans = ", ".join(str(s) for s in sorted(left_out))
    return (
        f"left out {sum(left_out.values())} images of spans {spans}: admitted by an "
        f"acceptance, the {baseline} was trained on them and the candidate's window has "
        "moved past them"
    )


def compare(
    reference: ReferenceSet,
    scored: scoring.Scored,
    labels: list[str],
    champion_labels: tuple[str, ...] | None,
    left_behind: Sequence[int] = (),
    baseline: str = "champion",
) -> ev.Comparison:
    """Both models' metrics on the classes the set and both know, and the two compared
    image by image (the candidate's alone when there is no champion to compare with).
    Images of the `left_behind` spans (references.left_behind: the `baseline` model was
    trained on them, the candidate was not) are left out, and the note says so."""
    scored, behind = scoring.without_spans(scored, left_behind)
    if behind and not scored.labels.size:
        note = _behind_note(behind, baseline)
        return ev.Comparison(reference.name, reference.uri, False, f"skipped: {note}")
    models = [labels] + ([list(champion_labels)] if champion_labels is not None else [])
    shared = scoring.shared_classes(reference.labels, *models)
    left_out = [name for name in reference.labels if name not in shared]
    note = _notes(
        _behind_note(behind, baseline),
        f"left out {left_out}: not known to both models" if left_out else "",
    )
    if not shared:
        return ev.Comparison(
            reference.name, reference.uri, False, f"skipped: no class in common ({note})"
        )
    rows = len(reference.labels)
    candidate = scoring.shared_metrics(
        reference.labels, labels, scored.matrix(0, rows, len(labels)), shared
    )
    if champion_labels is None:
        note = "; ".join(filter(None, ["no champion to compare with", note]))
        return ev.Comparison(reference.name, reference.uri, False, note, shared, candidate)
    champion = scoring.shared_metrics(
        reference.labels, champion_labels, scored.matrix(1, rows, len(champion_labels)), shared
    )
    by_class = scoring.paired_by_class(scored, reference.labels, models, shared)
    total = sum((c.paired for c in by_class), paired.Paired(0, 0, 0))
    return ev.Comparison(
        reference.name,
        reference.uri,
        True,
        note,
        shared,
        candidate,
        champion,
        total,
        by_class,
    )


def champion_of(
    config: EvaluatorConfig, resolved: champion_lib.Resolved | None, labels: list[str]
) -> tuple[ev.Champion, tuple[str, ...]]:
    """The champion the run resolved, as the evaluation records it, and its classes."""
    if resolved is None:
        return ev.Champion(ev.NO_CHAMPION, "no champion was resolved for this run"), ()
    if resolved.status == champion_lib.UNREADABLE:
        return ev.Champion(ev.UNREADABLE, resolved.reason), ()
    if resolved.status == champion_lib.NOT_SET:
        return ev.Champion(ev.NO_CHAMPION, "no complete push in (none set) yet"), ()
    return find_champion(config, resolved.lookup(), labels)


def same_training(champion: ev.Champion, candidate_dir: str) -> ev.Champion:
    """Marks a champion trained on what the candidate was trained on (both digests
    known and equal)."""
    if champion.status != ev.COMPARED or not champion.path:
        return champion
    theirs = served_models.training_of(champion.path).get("digest")
    ours = served_models.training_of(candidate_dir).get("digest")
    if not theirs or theirs != ours:
        return champion
    return dataclasses.replace(champion, same_training=True)


@dataclasses.dataclass(frozen=True)
class _Scored:
    """The models on every evaluation set: the candidate, the champion and, when it is
    another model, the record holder."""

    candidate: ev.ModelMetrics
    champion: ev.Champion
    comparisons: tuple[ev.Comparison, ...]
    record: ev.Champion | None = None
    record_comparisons: tuple[ev.Comparison, ...] = ()


def record_of(
    config: EvaluatorConfig, resolved: champion_lib.Resolved | None, labels: list[str]
) -> tuple[ev.Champion | None, tuple[str, ...]]:
    """The record holder the run resolved when it is another model than the champion,
    as the evaluation records it, and its classes; (None, ()) when there is none."""
    if resolved is None or resolved.record_version is None or resolved.record_path is None:
        return None, ()
    model = served_models.ServedModel(
        resolved.record_path, resolved.record_version, resolved.record_labels
    )
    record, record_labels = find_champion(config, served_models.Lookup(model), labels)
    return (record, record_labels) if record.status == ev.COMPARED else (None, ())


# The order evaluation.json and the summary list the sets in.
_SET_ORDER = (
    reference_sets.NEW_SPLIT,
    reference_sets.CHAMPION_REFERENCE,
    reference_sets.EARLIER_SPANS,
    reference_sets.GOLDEN,
)


def score_sets(
    config: EvaluatorConfig,
    new_split: ReferenceSet,
    labels: list[str],
    candidate_dir: str,
    champion: ev.Champion,
    champion_labels: tuple[str, ...],
    record: ev.Champion | None = None,
    record_labels: tuple[str, ...] = (),
    earlier: Sequence[tuple[int, ReferenceSet]] = (),
    earlier_skipped: Sequence[ev.Comparison] = (),
) -> _Scored:
    """Scores the candidate, and the champion when there is one, on the new split, the
    champion's reference set, the eval splits of the earlier spans (`earlier`: (span,
    its eval split), newest first; merged, less the images the new split and the
    reference set hold) and the golden set; sets that cannot be read are skipped
    comparisons that say why (`earlier_skipped`: the earlier spans found so already). The
    record holder, when given, is scored on the same images and compared with the
    candidate set by set."""
    others, comparisons = other_sets(config, champion)
    comparisons += earlier_skipped
    earlier_note = ""
    scored: list[ev.Comparison] = []
    against_record: list[ev.Comparison] = []
    with contextlib.ExitStack() as local:
        # TensorFlow reads these: object-store copies are made local first.
        staged_in = local.enter_context(tempfile.TemporaryDirectory(prefix="imgpipe-eval-"))

        def staged(reference: ReferenceSet) -> list[str]:
            folder = os.path.join(staged_in, reference.name)
            return list(staging.stage_files(reference.shards, folder, reference.uri))

        def loaded(model: ev.Champion, what: str) -> ev.Champion:
            """Adds the model's predictor; the model marked unreadable, with why, if not."""
            try:
                model_dir = local.enter_context(staging.local_copy(model.path or ""))
                predictors.append(scoring.predictor(model_dir))
            except READ_ERRORS as e:
                return dataclasses.replace(
                    model, status=ev.UNREADABLE, note=f"the {what} did not load: {e}"
                )
            return model

        predictors = [scoring.predictor(local.enter_context(staging.local_copy(candidate_dir)))]
        if champion.status == ev.COMPARED:
            champion = loaded(champion, "champion")
        compared_labels = champion_labels if len(predictors) > 1 else None
        if record is not None and compared_labels is not None:
            record = loaded(record, "record holder")
        behind_champion = (
            references.left_behind(champion.path, candidate_dir)
            if champion.status == ev.COMPARED
            else ()
        )
        behind_record = references.left_behind(record.path if record else None, candidate_dir)

        def held_to_record(reference: ReferenceSet, found: scoring.Scored) -> None:
            if len(predictors) > 2:
                on_pair = scoring.pair(found, 0, 2)
                against_record.append(
                    compare(
                        reference, on_pair, labels, record_labels, behind_record, "record holder"
                    )
                )

        if earlier:
            # Less the images of the sets scored before it (the reference set is scored
            # only beside a champion that loaded).
            seen = [new_split] + [
                r
                for r in others
                if r.name == reference_sets.CHAMPION_REFERENCE and compared_labels is not None
            ]
            folder = os.path.join(staged_in, reference_sets.EARLIER_SPANS)
            merged, earlier_note, skipped = _merged_earlier(earlier, seen, labels, folder)
            comparisons += skipped
            if merged is not None:  # after the reference set, before the golden set
                golden = [r for r in others if r.name == reference_sets.GOLDEN]
                others.insert(len(others) - len(golden), merged)
        on_split = scoring.score(staged(new_split), len(labels), predictors)
        scored.append(compare(new_split, on_split, labels, compared_labels))
        held_to_record(new_split, on_split)
        for reference in others:
            # Without a champion, the sets it brings are not there; the others are
            # scored on the candidate alone (they add to the floor's evidence).
            if compared_labels is None and reference.name == reference_sets.CHAMPION_REFERENCE:
                continue
            try:
                found = scoring.score(staged(reference), len(reference.labels), predictors)
            except READ_ERRORS as e:
                comparisons.append(
                    ev.Comparison(reference.name, reference.uri, False, f"skipped: unreadable: {e}")
                )
                continue
            scored.append(compare(reference, found, labels, compared_labels, behind_champion))
            held_to_record(reference, found)
            if reference.name == reference_sets.EARLIER_SPANS:
                scored[-1] = dataclasses.replace(
                    scored[-1], note=_notes(earlier_note, scored[-1].note)
                )
                if against_record and against_record[-1].name == reference_sets.EARLIER_SPANS:
                    against_record[-1] = dataclasses.replace(
                        against_record[-1], note=_notes(earlier_note, against_record[-1].note)
                    )
    candidate = scoring.metrics_from_confusion(labels, on_split.matrix(0, len(labels), len(labels)))
    if compared_labels is not None:
        champion = dataclasses.replace(champion, metrics=scored[0].champion)
    else:
        scored = scored[1:]  # the new split has no champion to be compared with
    every = sorted(scored + comparisons, key=lambda c: _SET_ORDER.index(c.name))
    if record is not None and against_record:
        record = dataclasses.replace(record, metrics=against_record[0].champion)
    # At the levels the decision judges them at (shared among the sets: blessing.py).
    tested, tested_record = blessing_lib.tested(every, against_record, config)
    return _Scored(candidate, champion, tested, record, tested_record)


class Executor(base_executor.BaseExecutor):
    """Keys: inputs `examples`, `model` and optional `champion` (the ChampionResolver's);
    outputs `evaluation`, `blessing`; parameters `evaluator_config` (EvaluatorConfig
    JSON), `tolerance`, `eval_split`. It holds the run's serving lease while it works,
    gives it back when it does not bless, and hands it to the Pusher when it does."""

    @disk_full.explained("Evaluator", disk_full.first_output)
    def Do(  # noqa: N802 - TFX's executor interface
        self,
        input_dict: dict[str, list[types.Artifact]],
        output_dict: dict[str, list[types.Artifact]],
        exec_properties: dict[str, Any],
    ) -> None:
        config = config_from_properties(exec_properties)
        examples = artifact_utils.get_single_instance(input_dict[spec.EXAMPLES_KEY])
        model = artifact_utils.get_single_instance(input_dict[spec.MODEL_KEY])
        resolved = champion_lib.from_inputs(input_dict.get(spec.CHAMPION_KEY))
        with champion_lib.holding(resolved):
            # Outputs a killed or retried step left incomplete fail here, the file named.
            manifest.verify(examples.uri)
            manifest.verify(model.uri)
            eval_split = exec_properties.get(spec.EVAL_SPLIT_KEY) or ""
            splits = artifact_utils.decode_split_names(examples.split_names)
            if eval_split not in splits:
                raise ValueError(f"{examples.uri} has no split {eval_split!r}; it has {splits}")
            new_split = reference_sets.from_split(examples.uri, eval_split)
            labels = list(new_split.labels)
            candidate_dir = path_utils.serving_model_path(model.uri)
            candidate_labels = list(served_models.read_labels(candidate_dir))
            if candidate_labels != labels:
                raise ValueError(
                    f"the model {candidate_dir} was trained on labels {candidate_labels}, "
                    f"the examples {examples.uri} have {labels}"
                )
            champion, champion_labels = champion_of(config, resolved, labels)
            champion = same_training(champion, candidate_dir)
            record, record_labels = record_of(config, resolved, labels)
            span = span_of(examples)
            spans, gone = earlier_spans(resolved, candidate_dir, span)
            earlier, unreadable = earlier_splits(spans, eval_split)
            scored = score_sets(
                config,
                new_split,
                labels,
                candidate_dir,
                champion,
                champion_labels,
                record,
                record_labels,
                earlier,
                (*gone, *unreadable),
            )
            result = self._decide(config, eval_split, scored)
            blessing_out = artifact_utils.get_single_instance(output_dict[spec.BLESSING_KEY])
            evaluation_out = artifact_utils.get_single_instance(output_dict[spec.EVALUATION_KEY])
            self._write(config, result, new_split, span, evaluation_out, blessing_out)
            if span is not None:  # for the Pusher's record in the serving history
                blessing_out.set_int_custom_property(SPAN_PROPERTY, span)
            if resolved is not None and resolved.lease_token:
                self._hand_on_or_release(resolved, result.decision.blessed, blessing_out)

    def _decide(self, config: EvaluatorConfig, eval_split: str, scored: _Scored) -> ev.Evaluation:
        decision = blessing_lib.decide(
            scored.candidate,
            scored.champion,
            config,
            scored.comparisons,
            scored.record,
            scored.record_comparisons,
        )
        becomes_record, record_reason = (
            blessing_lib.becomes_record(
                scored.champion, scored.record, scored.comparisons, scored.record_comparisons
            )
            if decision.blessed
            else (False, "")
        )
        majority_label, majority_rate = blessing_lib.majority(scored.candidate)
        result = ev.Evaluation(
            eval_split=eval_split,
            majority_label=majority_label,
            majority_rate=majority_rate,
            required_accuracy=blessing_lib.required_accuracy(scored.candidate, config),
            candidate=scored.candidate,
            champion=scored.champion,
            decision=decision,
            comparisons=scored.comparisons,
            record=scored.record,
            record_comparisons=scored.record_comparisons,
            becomes_record=becomes_record,
            record_reason=record_reason,
        )
        logging.info("ImageEvaluator: %s", decision.reason)
        if scored.champion.note:
            logging.info("ImageEvaluator: champion: %s", scored.champion.note)
        for comparison in scored.comparisons:
            if comparison.note:
                logging.info("ImageEvaluator: %s: %s", comparison.name, comparison.note)
        return result

    def _write(
        self,
        config: EvaluatorConfig,
        result: ev.Evaluation,
        new_split: ReferenceSet,
        span: int | None,
        evaluation_out: types.Artifact,
        blessing_out: types.Artifact,
    ) -> None:
        ev.write(evaluation_out.uri, result)
        report.write(evaluation_out.uri, result)
        decision, champion = result.decision, result.champion
        if decision.blessed:
            # The Pusher copies it into the push: the next candidate is judged on it too.
            references.write_grown(
                new_split,
                span,
                champion.path if champion.status == ev.COMPARED else None,
                os.path.join(blessing_out.uri, reference_sets.REFERENCE_DIR),
                config.reference_per_class,
            )
        else:
            fileio.makedirs(blessing_out.uri)
        marker = spec.BLESSED_FILE if decision.blessed else spec.NOT_BLESSED_FILE
        fileio.write_text(os.path.join(blessing_out.uri, marker), "")
        # Beside the blessing too: the Pusher's model card reads the scores there.
        ev.write(blessing_out.uri, result)
        blessing_out.set_int_custom_property(spec.BLESSED_PROPERTY, int(decision.blessed))
        blessing_out.set_string_custom_property(spec.REASON_PROPERTY, decision.reason)
        if champion.version is not None:
            blessing_out.set_int_custom_property(spec.CHAMPION_PROPERTY, champion.version)
        # The Pusher records the push as the record holder (record_holder.py) when this says so.
        blessing_out.set_int_custom_property(spec.RECORD_PROPERTY, int(result.becomes_record))
        blessing_out.set_string_custom_property(spec.RECORD_REASON_PROPERTY, result.record_reason)

    def _hand_on_or_release(
        self, resolved: champion_lib.Resolved, blessed: bool, blessing_out: types.Artifact
    ) -> None:
        """The Pusher's compare-and-swap: the head the run resolved must still be the
        newest push, and the served version still the one models.config names; the
        lease goes to the Pusher with a blessing, else back."""
        blessing_out.set_int_custom_property(
            serving_lock.SERVING_HEAD_PROPERTY,
            serving_lock.NO_HEAD if resolved.head is None else resolved.head,
        )
        blessing_out.set_int_custom_property(
            serving_lock.SERVED_PROPERTY,
            serving_lock.NO_HEAD if resolved.served is None else resolved.served,
        )
        if blessed:
            blessing_out.set_string_custom_property(
                serving_lock.LEASE_PROPERTY, resolved.lease_token
            )
        else:
            serving_lock.release(resolved.serving_dir, resolved.lease_token)
