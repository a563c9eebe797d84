"""span_folders.resolve_span_folder: the folder a span pattern names, found by listing
the folders as a scheduler writes them (stray names, files, zero padding, versions)."""

from __future__ import annotations

import pytest
from tfx.components.example_gen import utils

from imgpipe.components.image_example_gen.span_folders import (
    NOT_A_FOLDER,
    Ignored,
    fill,
    resolve_span_folder,
)


def make(root, *paths: str, files: tuple[str, ...] = ()) -> str:
    for path in paths:
        (root / path).mkdir(parents=True)
    for path in files:
        (root / path).write_text("x")
    return str(root)


@pytest.mark.unit
def test_a_stray_folder_and_a_file_are_ignored_by_name_and_the_latest_span_is_read(tmp_path):
    base = make(
        tmp_path,
        *(f"span-{n}" for n in range(1, 7)),
        "span-x",
        ".span-7.partial",
        files=("notes.txt",),
    )

    folder = resolve_span_folder(base, "span-{SPAN}")

    assert (folder.path, folder.span, folder.version) == ("span-6", 6, None)
    assert folder.ignored == (
        Ignored("notes.txt", "not named as span-{SPAN} says"),
        Ignored("span-x", "not named as span-{SPAN} says"),
    )
    assert folder.warning(base) == (
        f"ignored in {base}: notes.txt and span-x (not named as span-{{SPAN}} says); "
        "span 6 is read, from span-6"
    )


@pytest.mark.unit
def test_nothing_ignored_means_no_warning(tmp_path):
    base = make(tmp_path, "span-1", "span-2", ".DS_Store")
    folder = resolve_span_folder(base, "span-{SPAN}")
    assert (folder.path, folder.warning(base)) == ("span-2", None)


@pytest.mark.unit
def test_a_zero_padded_folder_is_read_as_it_is_named_with_or_without_a_width(tmp_path):
    base = make(tmp_path, "span-005", "span-007", "span-x")

    plain = resolve_span_folder(base, "span-{SPAN}")
    padded = resolve_span_folder(base, "span-{SPAN:3}")

    assert (plain.path, plain.span) == (padded.path, padded.span) == ("span-007", 7)
    assert fill("span-{SPAN:3}", 7) == "span-007"


@pytest.mark.unit
def test_a_width_takes_exactly_that_many_digits_and_names_the_rest(tmp_path):
    base = make(tmp_path, "span-007", "span-8", "span-1000")
    folder = resolve_span_folder(base, "span-{SPAN:3}")
    assert (folder.path, folder.span) == ("span-007", 7)
    assert [i.path for i in folder.ignored] == ["span-1000", "span-8"]


@pytest.mark.unit
def test_a_file_named_as_a_span_is_not_read(tmp_path):
    base = make(tmp_path, "span-2", files=("span-3",))
    folder = resolve_span_folder(base, "span-{SPAN}")
    assert (folder.path, folder.ignored) == ("span-2", (Ignored("span-3", NOT_A_FOLDER),))


@pytest.mark.unit
def test_the_newest_version_of_the_newest_span_is_read_padded_as_it_exists(tmp_path):
    base = make(
        tmp_path,
        "span-1/v9",
        "span-002/v1",
        "span-002/v03",
        "span-002/old",
        "span-3",  # no version landed yet: not a candidate
    )

    folder = resolve_span_folder(base, "span-{SPAN}/v{VERSION}")

    assert (folder.path, folder.span, folder.version) == ("span-002/v03", 2, 3)
    assert folder.ignored == (Ignored("span-002/old", "not named as v{VERSION} says"),)


@pytest.mark.unit
def test_a_static_range_takes_its_span_in_whichever_spelling_exists(tmp_path):
    base = make(tmp_path, "span-004", "span-9")
    folder = resolve_span_folder(base, "span-{SPAN}", span=4)
    assert (folder.path, folder.span) == ("span-004", 4)
    with pytest.raises(FileNotFoundError, match=r"matches span-\{SPAN\} for span 5 \("):
        resolve_span_folder(base, "span-{SPAN}", span=5)


@pytest.mark.unit
def test_date_specs_give_tfxs_span_number(tmp_path):
    base = make(tmp_path, "2024-01-31", "2024-02-30", "latest")
    folder = resolve_span_folder(base, "{YYYY}-{MM}-{DD}")
    assert (folder.path, folder.span) == ("2024-01-31", utils.date_to_span_number(2024, 1, 31))
    assert [(i.path, i.reason) for i in folder.ignored] == [
        ("2024-02-30", "not a date"),
        ("latest", "not named as {YYYY}-{MM}-{DD} says"),
    ]


@pytest.mark.unit
def test_a_pattern_that_matches_nothing_names_what_the_folder_holds(tmp_path):
    base = make(tmp_path, "2024-05", "span-x", files=("notes.txt",))
    with pytest.raises(FileNotFoundError) as raised:
        resolve_span_folder(base, "span-{SPAN}")
    assert str(raised.value) == (
        f"no folder in {base} matches span-{{SPAN}} (it holds 2024-05, notes.txt and "
        f"span-x); put each span in a folder of {base} named as the pattern says "
        "(span-1, ...)"
    )


@pytest.mark.unit
def test_an_empty_or_missing_parent_says_so(tmp_path):
    base = make(tmp_path, "spans")
    with pytest.raises(FileNotFoundError, match=r"matches span-\{SPAN:2\} \(it is empty\); .* "):
        resolve_span_folder(f"{base}/spans", "span-{SPAN:2}")
    with pytest.raises(FileNotFoundError) as raised:
        resolve_span_folder(f"{base}/nowhere", "span-{SPAN:2}")
    assert str(raised.value) == (
        f"{base}/nowhere, the folder that holds the spans, does not exist; create it and put "
        "each span in it (span-01, ...)"
    )


@pytest.mark.unit
def test_span_folders_below_the_span_are_named_when_no_version_matches(tmp_path):
    base = make(tmp_path, "span-1/photos", "span-2")
    with pytest.raises(FileNotFoundError, match=r"\(it holds span-1/photos and span-2\)"):
        resolve_span_folder(base, "span-{SPAN}/v{VERSION}")


@pytest.mark.unit
def test_two_spellings_of_the_read_span_are_refused_by_name(tmp_path):
    base = make(tmp_path, "span-1", "span-07", "span-7")
    with pytest.raises(ValueError) as raised:
        resolve_span_folder(base, "span-{SPAN}")
    assert str(raised.value) == (
        f"span-07 and span-7 in {base} are both span 7; keep one of them (rename or remove "
        "the others)"
    )


@pytest.mark.unit
@pytest.mark.parametrize(
    "pattern, problem",
    [
        ("s-{SPAN}/{SPAN}", "each spec may appear once"),
        ("s-{SPAN:x}", "the width in {SPAN:x} must be a positive whole number"),
        ("v{VERSION}", "{VERSION} needs {SPAN} (or the date specs) beside it"),
        ("{YYYY}-{MM}", "the date specs come together: {YYYY}, {MM} and {DD}"),
        ("{SPAN}-{YYYY}{MM}{DD}", "give {SPAN} or the date specs, not both"),
    ],
)
def test_an_invalid_pattern_is_refused_before_anything_is_listed(pattern, problem):
    with pytest.raises(ValueError) as raised:
        resolve_span_folder("/nowhere", pattern)
    assert str(raised.value) == f"span pattern {pattern}: {problem}"


@pytest.mark.unit
def test_a_pattern_without_specs_is_returned_unlisted():
    folder = resolve_span_folder("/nowhere", "images")
    assert (folder.path, folder.span, folder.version, folder.ignored) == ("images", 0, None, ())
