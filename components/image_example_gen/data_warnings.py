"""What a conversion warns about, by name: empty class folders (a folder whose name
cannot be a class too), classes too small to appear in every split, fewer than two
classes, empty splits, label conflicts, and how split folders were read.

None of these stops a conversion: each is logged, kept in the conversion summary's
`warnings`, and printed by `imgpipe convert`, so a user knows which class or split to
look at before training starts.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from imgpipe.components.common.formats.conversion_summary import (
    EMPTY_CLASS,
    EMPTY_SPLIT,
    FEW_CLASSES,
    LABEL_CONFLICT,
    MAX_LISTED_PATHS,
    SMALL_CLASS,
    SPLIT_FOLDERS,
    ConversionWarning,
    LabelConflict,
)

# What a classifier, and so the pipeline, needs at least.
MIN_CLASSES = 2


def too_few_classes_message(classes: Sequence[str]) -> str:
    """The one line for a dataset with fewer than MIN_CLASSES classes holding images."""
    named = f" ({', '.join(repr(c) for c in classes)})" if classes else ""
    return (
        f"the dataset has {len(classes)} class{'' if len(classes) == 1 else 'es'} with "
        f"images{named}, and a classifier needs at least {MIN_CLASSES}: add a folder "
        "<label>/ of images for each other class"
    )


def _counts(label: str, split_labels: Mapping[str, Mapping[str, int]]) -> str:
    return ", ".join(f"{split} {labels.get(label, 0)}" for split, labels in split_labels.items())


def conversion_warnings(
    *,
    split_labels: Mapping[str, Mapping[str, int]],
    listed_by_label: Mapping[str, int],
    class_folders: Sequence[str],
    given_splits: bool,
    conflicts: Sequence[LabelConflict],
    split_notes: Sequence[str] = (),
    refused_folders: Sequence[tuple[str, str]] = (),
) -> list[ConversionWarning]:
    """The warnings of one conversion, in a fixed order.

    Args:
      split_labels: split -> label -> records written, for every output split.
      listed_by_label: label -> image files listed under it.
      class_folders: every class folder's label, including folders with no image.
      given_splits: the splits came from the folders (a split layout).
      conflicts: the label conflicts found.
      split_notes: how the split folders were mapped (split_names.GivenSplits.notes).
      refused_folders: (label, why) of the class folders whose name cannot be a class
        (listing.refused_class_folders): every file in them was skipped.
    """
    found = [ConversionWarning(SPLIT_FOLDERS, note) for note in split_notes]
    written = {
        label: sum(labels.get(label, 0) for labels in split_labels.values())
        for label in sorted(set(class_folders) | set(listed_by_label))
    }
    found += _empty_classes(written, listed_by_label, refused_folders)
    found += _small_classes(written, split_labels, given_splits)
    for split, labels in split_labels.items():
        if not sum(labels.values()):
            found.append(ConversionWarning(EMPTY_SPLIT, f"split {split!r} has no image"))
    classes = [label for label, count in written.items() if count]
    if len(classes) < MIN_CLASSES:
        found.append(ConversionWarning(FEW_CLASSES, too_few_classes_message(classes)))
    found += _conflicts(conflicts)
    return found


def _empty_classes(
    written: Mapping[str, int],
    listed_by_label: Mapping[str, int],
    refused_folders: Sequence[tuple[str, str]],
) -> list[ConversionWarning]:
    """The classes with no image written: an empty folder, every file skipped, or a
    folder whose name cannot be a class."""
    found = []
    for label, count in written.items():
        if count:
            continue
        listed = listed_by_label.get(label, 0)
        found.append(
            ConversionWarning(
                EMPTY_CLASS,
                f"class folder {label!r} has no image"
                if not listed
                else f"class {label!r} has no image written: all {listed} of its image "
                "files were skipped (see skipped.json)",
            )
        )
    for label, problem in refused_folders:
        found.append(
            ConversionWarning(
                EMPTY_CLASS,
                f"class folder {label!r} lost every file: {problem}; rename the folder",
            )
        )
    return found


def _small_classes(
    written: Mapping[str, int],
    split_labels: Mapping[str, Mapping[str, int]],
    given_splits: bool,
) -> list[ConversionWarning]:
    """The classes with images that are missing from a split."""
    found = []
    for label, count in written.items():
        missing = [split for split, labels in split_labels.items() if not labels.get(label)]
        if not count or not missing:
            continue
        message = (
            f"class {label!r} has {count} image{'s' if count > 1 else ''}, too few to "
            f"appear in every split ({_counts(label, split_labels)})"
            if count < len(split_labels) and not given_splits
            else f"class {label!r} has no image in split(s) {missing} "
            f"({_counts(label, split_labels)})"
        )
        found.append(ConversionWarning(SMALL_CLASS, message))
    return found


def _conflicts(conflicts: Sequence[LabelConflict]) -> list[ConversionWarning]:
    """The first MAX_LISTED_PATHS label conflicts, and how many more there are."""
    found = []
    for conflict in conflicts[:MAX_LISTED_PATHS]:
        outcome = "kept in one split" if conflict.kept else "skipped"
        found.append(ConversionWarning(LABEL_CONFLICT, f"{conflict.reason} ({outcome})"))
    if len(conflicts) > MAX_LISTED_PATHS:
        found.append(
            ConversionWarning(
                LABEL_CONFLICT,
                f"{len(conflicts) - MAX_LISTED_PATHS} more label conflicts: see label_conflicts "
                "in conversion_summary.json",
            )
        )
    return found
