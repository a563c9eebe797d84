"""The names of a pre-split folder's splits: the usual folder names, and which split the
Trainer and the Evaluator read.

A `root/<split>/<label>/` tree names its splits as Keras, TFDS and most datasets do
(`validation/`, `val/`, `test/`, ...). Each folder name maps to one canonical split name,
so `root/validation/` becomes `Split-eval`, the split the Evaluator reads by default:

  train, training                                  -> train
  eval, evaluation, validation, val, valid, dev    -> eval
  test, testing                                    -> test

Folder names are matched case-insensitively; a name outside this table (with
`layout: split`) is kept as it is.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable

from imgpipe.components.common.formats.layout import EVAL_SPLIT, TEST_SPLIT, TRAIN_SPLIT

SPLIT_ALIASES: dict[str, str] = {
    TRAIN_SPLIT: TRAIN_SPLIT,
    "training": TRAIN_SPLIT,
    EVAL_SPLIT: EVAL_SPLIT,
    "evaluation": EVAL_SPLIT,
    "validation": EVAL_SPLIT,
    "val": EVAL_SPLIT,
    "valid": EVAL_SPLIT,
    "dev": EVAL_SPLIT,
    TEST_SPLIT: TEST_SPLIT,
    "testing": TEST_SPLIT,
}


def canonical_split(folder: str) -> str:
    """The split a top-level folder of a split layout holds (see the module docstring)."""
    return SPLIT_ALIASES.get(folder.lower(), folder)


def aliases_of(split: str) -> list[str]:
    """The folder names that become `split`, e.g. for eval: dev, eval, evaluation, ..."""
    return sorted(folder for folder, name in SPLIT_ALIASES.items() if name == split) or [split]


@dataclasses.dataclass(frozen=True)
class GivenSplits:
    """How the folders of a split layout become the output's splits.

    Attributes:
      split_of: top-level folder -> the split its images are written to.
      notes: what was decided and why, one line each, for the conversion's warnings.
    """

    split_of: dict[str, str]
    notes: list[str]

    @property
    def names(self) -> list[str]:
        """The output's split names, sorted."""
        return sorted(set(self.split_of.values()))


def resolve_given_splits(folders: Iterable[str], train_split: str, eval_split: str) -> GivenSplits:
    """Maps a split layout's top-level folders to the output's splits.

    With no folder for the eval split, the test split stands in for it (and a note
    says so), so a `train/ + test/` tree trains and evaluates without a change.

    Args:
      folders: the top-level folder names that hold images.
      train_split, eval_split: the splits the Trainer and the Evaluator read
        (OutputOptions.train_split and eval_split).

    Raises:
      ValueError: two folders map to one split, or the train or eval split is
        missing; the message names the folders found and the setting to change.
    """
    found = sorted(set(folders))
    split_of = {folder: canonical_split(folder) for folder in found}
    by_split: dict[str, list[str]] = {}
    for folder, split in split_of.items():
        by_split.setdefault(split, []).append(folder)
    for split, sources in sorted(by_split.items()):
        if len(sources) > 1:
            raise ValueError(
                f"split folders {sources} are all the {split!r} split; keep one of them "
                f"(split folders found: {found})"
            )
    notes = []
    if eval_split not in by_split and TEST_SPLIT in by_split and train_split != TEST_SPLIT:
        (test_folder,) = by_split[TEST_SPLIT]
        split_of[test_folder] = eval_split
        notes.append(
            f"no validation folder: the test folder {test_folder!r} is the {eval_split!r} "
            "split, which the Evaluator reads"
        )
    names = sorted(set(split_of.values()))
    for role, split, setting in (
        ("train", train_split, "train_split"),
        ("eval", eval_split, "eval_split"),
    ):
        if split not in names:
            raise ValueError(
                f"the image folder has split folders {found} but none for the {role} split "
                f"{split!r} (a folder named {', '.join(aliases_of(split))}): add one, or set "
                f"example_gen.output.{setting} (imgpipe convert --{setting.replace('_', '-')}) "
                f"to one of {names}"
            )
    return GivenSplits(split_of, notes)
