"""The imgpipe command line, run in-process as a user would call it."""

from __future__ import annotations

import json
import os

import pytest

from imgpipe.pipelines import cli
from tests import imagegen

IN_PROCESS = ["--runner=DirectRunner", "--direct_num_workers=1"]


@pytest.mark.unit
def test_help_lists_the_subcommands(capsys):
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["--help"])
    assert exit_info.value.code == 0
    out = capsys.readouterr().out
    for name in ("version", "convert", "stats", "run", "demo", "kfp"):
        assert f"    {name}" in out


@pytest.mark.unit
def test_version_prints_the_stack(capsys):
    assert cli.main(["version"]) == 0
    out = capsys.readouterr().out
    assert "tfx                          1.21.0" in out
    assert "tensorflow                   2.21.0" in out
    assert "apache-beam" in out and "kfp" in out


@pytest.mark.component
def test_convert_shows_progress_and_a_summary(tmp_path, capsys):
    src = str(tmp_path / "src")
    imagegen.make_image_folder(src, {"a": 5, "b": 5})
    imagegen.write(os.path.join(src, "a", "broken.jpg"), b"")
    imagegen.write(os.path.join(src, "notes.txt"), b"x")
    with open(os.path.join(src, "a", "img_000.jpg"), "rb") as f:
        imagegen.write(os.path.join(src, "b", "copy.jpg"), f.read())
    os.makedirs(os.path.join(src, "c"))
    out = str(tmp_path / "out")

    code = cli.main(
        [
            "convert",
            src,
            out,
            "--resize",
            "16",
            "--center-crop",
            "--quality",
            "85",
            "--shards",
            "2",
            "--eval-fraction",
            "0.3",
            "--stratify",
            *IN_PROCESS,
        ]
    )

    assert code == 0
    captured = capsys.readouterr()
    assert "img/s" in captured.err  # the progress bar: count, rate and ETA
    assert "images written   9" in captured.out
    assert "skipped          3" in captured.out
    assert "ignored          1" in captured.out
    assert "files seen       13 = written + skipped + ignored" in captured.out
    assert "label conflicts  1   (2 byte-identical images under different labels, skipped" in (
        captured.out
    )
    assert "warning: class folder 'c' has no image\n" in captured.out
    assert (
        "warning: label conflict: identical bytes under labels [a, b]: a/img_000.jpg, "
        "b/copy.jpg (skipped)\n"
    ) in captured.out
    summary = json.load(open(os.path.join(out, "conversion_summary.json")))
    assert summary["image_options"]["resize"] == 16
    # Stratified 30% of the images written: 1 of the 4 "a" (the broken one and the
    # conflict are skipped), 1 of the 5 "b".
    assert summary["splits"]["eval"]["labels"] == {"a": 1, "b": 1}
    assert sorted(os.listdir(os.path.join(out, "Split-train"))) == [
        "data_tfrecord-00000-of-00002",
        "data_tfrecord-00001-of-00002",
    ]


@pytest.mark.component
def test_convert_refuses_a_non_empty_output(tmp_path, capsys):
    src = str(tmp_path / "src")
    imagegen.make_image_folder(src, {"a": 1})
    out = tmp_path / "out"
    out.mkdir()
    (out / "old").write_text("x")
    with pytest.raises(SystemExit, match="is not empty"):
        cli.main(["convert", src, str(out), *IN_PROCESS])


@pytest.mark.component
def test_convert_on_error_fail_names_the_file(tmp_path, capsys):
    src = str(tmp_path / "src")
    imagegen.make_image_folder(src, {"a": 2})
    imagegen.write(os.path.join(src, "a", "zero.png"), b"")
    out = tmp_path / "out"
    code = cli.main(["convert", src, str(out), "--on-error", "fail", "--no-progress", *IN_PROCESS])
    assert code == 1
    assert "a/zero.png: empty file (0 bytes)" in capsys.readouterr().err
    assert not any(out.rglob("data_tfrecord-*"))
