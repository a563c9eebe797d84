"""Listing an image folder, deciding splits and label ids: pure, deterministic decisions."""

from __future__ import annotations

import collections
import json
import re

import pytest

from imgpipe.components.common import label_map
from imgpipe.components.image_example_gen import labels, listing, splitting
from imgpipe.components.image_example_gen.options import OutputOptions

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
