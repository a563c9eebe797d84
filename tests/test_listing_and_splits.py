"""Listing an image folder, deciding splits and label ids: pure, deterministic decisions."""

from __future__ import annotations

import collections
import dataclasses
import json
import re

import pytest

from imgpipe.components.common.formats import conversion_summary, label_map
from imgpipe.components.common.formats.conversion_summary import LabelConflict
from imgpipe.components.common.runtime import config_loader
from imgpipe.components.image_example_gen import (
    data_warnings,
    labels,
    listing,
    split_names,
    splitting,
)
from imgpipe.components.image_example_gen.options import (
    ExampleGenConfig,
    ImageOptions,
    OutputOptions,
)

pytestmark = pytest.mark.unit


def test_flat_layout_labels_nested_files_and_ignores_the_rest():
    result = listing.classify(
        [
            "cat/a.jpg",
            "cat/deep/er/b.JPEG",
            "dog/c.png",
            ".DS_Store",
            "cat/.hidden.jpg",
            ".git/objects/x.jpg",
            "dog/notes.txt",
            "stray.jpg",
            "dog/d.WebP",
        ]
    )
    assert result.layout == "flat"
    assert [(i.relpath, i.label) for i in result.images] == [
        ("cat/a.jpg", "cat"),
        ("cat/deep/er/b.JPEG", "cat"),
        ("dog/c.png", "dog"),
        ("dog/d.WebP", "dog"),
    ]
    assert {f.relpath: f.reason for f in result.ignored} == {
        ".DS_Store": "hidden file",
        ".git/objects/x.jpg": "hidden file",
        "cat/.hidden.jpg": "hidden file",
        "dog/notes.txt": "not an image file name",
    }
    assert [(f.relpath, f.reason) for f in result.skipped] == [
        ("stray.jpg", "image outside a label folder")
    ]
    assert result.files_seen == 9
    assert result.labels == ["cat", "dog"]


def test_split_layout_is_detected_and_keeps_split_names():
    result = listing.classify(
        ["train/cat/a.jpg", "eval/dog/b.jpg", "test/cat/c.jpg", "train/loose.jpg"]
    )
    assert result.layout == "split"
    assert [(i.split, i.label) for i in result.images] == [
        ("eval", "dog"),
        ("test", "cat"),
        ("train", "cat"),
    ]
    assert result.given_splits == ["eval", "test", "train"]
    assert result.skipped[0].relpath == "train/loose.jpg"


def test_a_label_named_like_a_split_does_not_fool_detection():
    assert listing.detect_layout(["train/a.jpg", "cats/b.jpg"]) == "flat"


def test_hash_split_is_stable_and_close_to_the_ratios():
    paths = [f"c{i % 7}/img{i}.jpg" for i in range(5000)]
    splits = (("train", 0.8), ("eval", 0.2))
    first = [splitting.hash_split(p, splits) for p in paths]
    assert first == [splitting.hash_split(p, splits) for p in paths]
    share = collections.Counter(first)["eval"] / len(paths)
    assert 0.18 < share < 0.22
    # Adding files never moves existing ones.
    assert splitting.hash_split(paths[0], splits) == first[0]


def test_stratified_split_gives_every_label_the_exact_proportion():
    by_label = {"a": [f"a/{i}.jpg" for i in range(10)], "b": [f"b/{i}.jpg" for i in range(7)]}
    decided = splitting.stratified_split(by_label, (("train", 0.7), ("eval", 0.3)))
    counts = collections.Counter((p.split("/")[0], s) for p, s in decided.items())
    assert counts == {("a", "train"): 7, ("a", "eval"): 3, ("b", "train"): 5, ("b", "eval"): 2}


def test_split_counts_are_exact_and_reach_every_split_when_they_can():
    assert splitting.split_counts([0.9, 0.1], 100) == [90, 10]
    assert splitting.split_counts([0.7, 0.3], 7) == [5, 2]
    # 0.9/0.1 of 3 rounds to 3/0; a class of 3 still reaches eval.
    assert splitting.split_counts([0.9, 0.1], 3) == [2, 1]
    assert splitting.split_counts([0.8, 0.1, 0.1], 3) == [1, 1, 1]
    # Fewer items than splits: some split must go without.
    assert splitting.split_counts([0.9, 0.1], 1) == [1, 0]


def test_cut_points_decide_as_the_ranking_does_and_count_a_key_once():
    """The pipeline decides a content split from each label's cut points (splitting.py);
    they must give the same splits as ranking the keys, and copies must count once."""
    splits = (("train", 0.6), ("eval", 0.3), ("test", 0.1))
    names = [name for name, _ in splits]
    keys = [f"{i:064x}" for i in range(23)]
    ranked = splitting.stratified_split({"a": keys}, splits)
    cuts = splitting.cut_points([splitting.split_hash(k) for k in keys], [0.6, 0.3, 0.1])
    assert {k: splitting.split_at(splitting.split_hash(k), cuts, names) for k in keys} == ranked
    assert collections.Counter(ranked.values()) == {"train": 14, "eval": 7, "test": 2}
    # Each key five times over: the same cut points, so copies change no proportion.
    copies = [splitting.split_hash(k) for k in keys for _ in range(5)]
    assert splitting.cut_points(copies, [0.6, 0.3, 0.1]) == cuts


def test_a_content_key_splits_the_same_whatever_the_path():
    """By content, the split key is the image's SHA-256, not its path: copies at any
    paths get one split; by path, copies of one image are split apart."""
    splits = (("train", 0.5), ("eval", 0.5))
    content = "ab" * 32
    assert len({splitting.hash_split(content, splits) for _ in range(3)}) == 1
    paths = [f"cat/copy{i}.jpg" for i in range(40)]
    assert set(splitting.stratified_split({"cat": paths}, splits).values()) == {"train", "eval"}


@pytest.mark.parametrize(
    "folder, split",
    [
        ("train", "train"),
        ("training", "train"),
        ("Train", "train"),
        ("eval", "eval"),
        ("evaluation", "eval"),
        ("validation", "eval"),
        ("val", "eval"),
        ("valid", "eval"),
        ("dev", "eval"),
        ("VAL", "eval"),
        ("test", "test"),
        ("testing", "test"),
    ],
)
def test_each_usual_split_folder_name_is_a_split(folder, split):
    assert listing.detect_layout([f"{folder}/cat/a.jpg", "train/dog/b.jpg"]) == "split"
    assert split_names.canonical_split(folder) == split
    given = split_names.resolve_given_splits(
        {folder, "train" if split != "train" else "val"}, "train", "eval"
    )
    assert given.split_of[folder] == (split if split != "test" else "eval")


def test_pre_split_folders_map_to_the_trained_and_evaluated_splits():
    given = split_names.resolve_given_splits(["training", "validation", "test"], "train", "eval")
    assert given.split_of == {"training": "train", "validation": "eval", "test": "test"}
    assert given.names == ["eval", "test", "train"] and given.notes == []
    # train + test and no validation: test is evaluated on, and a note says so.
    given = split_names.resolve_given_splits(["train", "test"], "train", "eval")
    assert given.split_of == {"train": "train", "test": "eval"}
    assert given.notes == [
        "no validation folder: the test folder 'test' is the 'eval' split, which the "
        "Evaluator reads"
    ]
    # Other names work with layout: split and the settings.
    given = split_names.resolve_given_splits(["fit", "holdout"], "fit", "holdout")
    assert given.split_of == {"fit": "fit", "holdout": "holdout"}


def test_a_missing_train_or_eval_split_folder_names_the_folders_and_the_setting():
    with pytest.raises(ValueError) as raised:
        split_names.resolve_given_splits(["train"], "train", "eval")
    message = str(raised.value)
    assert "\n" not in message
    assert message.startswith("the image folder has split folders ['train'] but none for the eval")
    assert "validation" in message and "example_gen.output.eval_split" in message
    assert "--eval-split" in message
    with pytest.raises(ValueError, match=r"\['test', 'val'\].*none for the train split 'train'"):
        split_names.resolve_given_splits(["val", "test"], "train", "eval")
    with pytest.raises(ValueError, match=r"split folders \['dev', 'val'\] are all the 'eval'"):
        split_names.resolve_given_splits(["train", "val", "dev"], "train", "eval")


def test_warnings_name_empty_and_small_classes_empty_splits_and_conflicts():
    conflict = LabelConflict("ab" * 32, ("cat", "dog"), ("cat/x.jpg", "dog/x.jpg"), kept=False)
    found = data_warnings.conversion_warnings(
        split_labels={"train": {"cat": 9, "dog": 9, "owl": 1, "bad": 0}, "eval": {"cat": 1}},
        listed_by_label={"cat": 11, "dog": 10, "owl": 1, "bad": 3},
        class_folders=["bad", "cat", "dog", "empty", "owl"],
        given_splits=False,
        conflicts=[conflict],
    )
    assert [(w.code, w.message) for w in found] == [
        (
            conversion_summary.EMPTY_CLASS,
            "class 'bad' has no image written: all 3 of its image files were skipped "
            "(see skipped.json)",
        ),
        (conversion_summary.EMPTY_CLASS, "class folder 'empty' has no image"),
        (
            conversion_summary.SMALL_CLASS,
            "class 'dog' has no image in split(s) ['eval'] (train 9, eval 0)",
        ),
        (
            conversion_summary.SMALL_CLASS,
            "class 'owl' has 1 image, too few to appear in every split (train 1, eval 0)",
        ),
        (
            conversion_summary.LABEL_CONFLICT,
            "label conflict: identical bytes under labels [cat, dog]: cat/x.jpg, dog/x.jpg "
            "(skipped)",
        ),
    ]
    found = data_warnings.conversion_warnings(
        split_labels={"train": {"cat": 3}, "eval": {}},
        listed_by_label={"cat": 3},
        class_folders=["cat"],
        given_splits=True,
        conflicts=[],
        split_notes=["a note"],
    )
    assert [(w.code, w.message) for w in found] == [
        (conversion_summary.SPLIT_FOLDERS, "a note"),
        (
            conversion_summary.SMALL_CLASS,
            "class 'cat' has no image in split(s) ['eval'] (train 3, eval 0)",
        ),
        (conversion_summary.EMPTY_SPLIT, "split 'eval' has no image"),
        (
            conversion_summary.FEW_CLASSES,
            "the dataset has 1 class with images ('cat'), and a classifier needs at least 2: "
            "add a folder <label>/ of images for each other class",
        ),
    ]


def test_a_label_conflict_lists_at_most_ten_paths():
    paths = tuple(f"{label}/{i:02d}.jpg" for label in ("a", "b") for i in range(6))
    reason = LabelConflict("0" * 64, ("a", "b"), paths, kept=False).reason
    assert reason.startswith("label conflict: identical bytes under labels [a, b]: a/00.jpg, ")
    assert reason.endswith("b/03.jpg and 2 more")


def test_label_ids_are_sorted_and_stay_stable_with_an_existing_map(tmp_path):
    assert labels.build_labels(["dog", "cat"], None, "fail") == ["cat", "dog"]
    existing = ["zebra", "cat"]
    assert labels.build_labels(["cat"], existing, "fail") == ["zebra", "cat"]
    with pytest.raises(ValueError, match=r"classes \['dog'\] are not in the given label map"):
        labels.build_labels(["cat", "dog"], existing, "fail")
    assert labels.build_labels(["cat", "dog"], existing, "append") == ["zebra", "cat", "dog"]

    label_map.write(str(tmp_path), ["zebra", "cat"])
    assert label_map.read(str(tmp_path / "label_map.json")).labels == ("zebra", "cat")
    assert label_map.read(str(tmp_path / "labels.txt")).labels == ("zebra", "cat")
    assert json.loads((tmp_path / "label_map.json").read_text()) == {
        "labels": ["zebra", "cat"],
        "version": 1,
    }


def test_options_are_validated_with_the_bad_value_named():
    with pytest.raises(ValueError, match="num_shards must be at least 1, got 0"):
        OutputOptions(num_shards=0).validate()
    with pytest.raises(ValueError, match="split 'eval' needs .* positive weight"):
        OutputOptions(splits=(("train", 1.0), ("eval", 0.0))).validate()
    with pytest.raises(ValueError, match="split_by must be content or path, got 'name'"):
        OutputOptions(split_by="name").validate()
    with pytest.raises(ValueError, match="on_label_conflict must be skip, keep or fail"):
        OutputOptions(on_label_conflict="merge").validate()
    with pytest.raises(ValueError, match="train_split and eval_split must differ"):
        OutputOptions(eval_split="train").validate()
    with pytest.raises(ValueError, match="eval_split must be a plain split name"):
        OutputOptions(eval_split="a/b").validate()


def test_options_are_validated_once_when_built():
    """An ImageOptions or OutputOptions that exists is valid: built in Python or loaded,
    a bad value fails at once, so the component and the conversion need not check it."""
    with pytest.raises(ValueError, match="center_crop needs resize"):
        ImageOptions(center_crop=True)
    with pytest.raises(ValueError, match="shard_mb must be positive"):
        dataclasses.replace(OutputOptions(), shard_mb=0)
    with pytest.raises(ValueError, match=r"^output\.num_shards must be at least 1, got 0$"):
        config_loader.from_dict(ExampleGenConfig, {"output": {"num_shards": 0}})


HOSTILE_CLASS_NAMES = [
    "cat",
    "chat noir",
    "кошка",
    "café",  # NFC
    "cafe\u0301",  # the same look, NFD: another class
    "\u202ecat",  # a right-to-left override: shown escaped, kept as it is
    "a\u200bb",
    "x\ufeff",
    " cat",
    "cat ",
    "\u00a0cat",
    "a\nb",
    "a\rb",
    "a\u2028b",
    "a\x85b",
    "a\x0bb",
    "a\tb",
    "\x1b[31mred",
    "\ufeffcat",
    "",
    # Class names are folder names: one safe path component each.
    "../../etc",
    "/etc/passwd",
    ".",
    "..",
    "a\\b",
    "é" * 128,  # 256 bytes in UTF-8
]


def test_labels_txt_round_trips_every_class_name_it_accepts(tmp_path):
    accepted = [name for name in HOSTILE_CLASS_NAMES if label_map.class_name_problem(name) is None]
    refused = {name: label_map.class_name_problem(name) for name in HOSTILE_CLASS_NAMES}
    refused = {name: reason for name, reason in refused.items() if reason is not None}
    assert accepted == HOSTILE_CLASS_NAMES[:8]
    assert (
        refused["a\nb"]
        == refused["a\u2028b"]
        == "it has a line break, which labels.txt cannot hold"
    )
    assert refused[" cat"] == "it has white space at an end, which labels.txt cannot keep"
    assert refused["a\tb"] == refused["\x1b[31mred"] == "it has a control character"
    assert (
        refused["../../etc"]
        == refused["/etc/passwd"]
        == refused["a\\b"]
        == "it has a path separator ('/' or '\\'), so it is not one folder name"
    )
    assert (
        refused["."]
        == refused[".."]
        == "it names a folder of the path ('.' or '..'), not a folder of its own"
    )
    assert refused["é" * 128] == "it is longer than the 255 bytes a folder name may have"
    assert label_map.class_name_problem("é" * 127 + "e") is None  # 255 bytes

    label_map.write(str(tmp_path), accepted)
    for name in ("labels.txt", "label_map.json"):
        assert label_map.read(str(tmp_path / name)).labels == tuple(accepted)
    for name, reason in refused.items():
        with pytest.raises(ValueError, match="cannot be a class"):
            label_map.write(str(tmp_path), ["cat", name])
        (tmp_path / "given.json").write_text(json.dumps({"version": 1, "labels": ["cat", name]}))
        with pytest.raises(ValueError, match=r"given\.json.*labels\[1\].*" + re.escape(reason)):
            label_map.read(str(tmp_path / "given.json"))


def test_a_label_folder_that_cannot_be_a_class_is_skipped_by_name():
    result = listing.classify(["cat/a.jpg", " dog/b.jpg", "owl\n/c.jpg"])
    assert [image.label for image in result.images] == ["cat"]
    assert {f.relpath: f.reason for f in result.skipped} == {
        " dog/b.jpg": "label folder ' dog' cannot be a class: it has white space at an end, "
        "which labels.txt cannot keep; rename it",
        "owl\n/c.jpg": "label folder 'owl\n' cannot be a class: it has a line break, "
        "which labels.txt cannot hold; rename it",
    }
    assert result.files_seen == 3


def test_class_folders_come_from_the_walk_empty_ones_too():
    folders = ["cat", "cat/deep", "empty", ".cache", " dog"]
    flat = listing.classify(["cat/a.jpg", "cat/deep/b.jpg", " dog/c.jpg"], folders=folders)
    # Hidden folders, nested folders and names that cannot be classes are not class folders.
    assert listing.class_folders(flat) == [(None, "cat"), (None, "empty")]
    split = listing.classify(
        ["train/cat/a.jpg", "val/cat/b.jpg"], folders=["train", "train/cat", "train/owl", "val"]
    )
    assert listing.class_folders(split) == [("train", "cat"), ("train", "owl")]


def test_a_label_map_file_is_refused_with_the_reason(tmp_path):
    for text, reason in (
        ('{"version": 1, "labels": ["a", "a"]}', "repeats a class name"),
        ('{"labels": ["a"]}', "schema version None"),
        ("[1, 2", "is not JSON"),
        ('{"version": 1, "labels": "a"}', "must be a list"),
    ):
        (tmp_path / "map.json").write_text(text)
        with pytest.raises(ValueError, match=reason):
            label_map.read(str(tmp_path / "map.json"))
    (tmp_path / "labels.txt").write_bytes(b"\xef\xbb\xbfcat\r\n\r\ndog  \n")  # BOM, CRLF
    assert label_map.read(str(tmp_path / "labels.txt")).labels == ("cat", "dog")
    (tmp_path / "latin.txt").write_bytes(b"caf\xe9\n")
    with pytest.raises(ValueError, match="not UTF-8"):
        label_map.read(str(tmp_path / "latin.txt"))


def test_warnings_name_a_refused_class_folder_and_too_few_classes():
    found = data_warnings.conversion_warnings(
        split_labels={"train": {"dog": 4}, "eval": {"dog": 1}},
        listed_by_label={"dog": 5},
        class_folders=["dog"],
        given_splits=False,
        conflicts=[],
        refused_folders=[(" cat", "it has white space at an end, which labels.txt cannot keep")],
    )
    assert [(w.code, w.message) for w in found] == [
        (
            conversion_summary.EMPTY_CLASS,
            "class folder ' cat' lost every file: it has white space at an end, which "
            "labels.txt cannot keep; rename the folder",
        ),
        (
            conversion_summary.FEW_CLASSES,
            "the dataset has 1 class with images ('dog'), and a classifier needs at least 2: "
            "add a folder <label>/ of images for each other class",
        ),
    ]
