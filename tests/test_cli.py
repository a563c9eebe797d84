"""The imgpipe command line, run in-process as a user would call it."""

from __future__ import annotations

import json
import os
import tempfile

import pytest

from imgpipe.pipelines import cli
from tests import imagegen
from tests.outputs import tree

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
def test_convert_shows_progress_and_a_summary(tmp_path, capsys, monkeypatch):
    temp = tmp_path / "temp"  # where the progress bar's files go, and Beam's until exit
    temp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(temp))
    src = str(tmp_path / "src")
    imagegen.make_image_folder(src, {"a": 5, "b": 5})
    imagegen.write(os.path.join(src, "a", "broken.jpg"), b"")
    imagegen.write(os.path.join(src, "notes.txt"), b"x")
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
    assert "images written   10" in captured.out
    assert "skipped          1" in captured.out
    assert "ignored          1" in captured.out
    assert "files seen       12 = written + skipped + ignored" in captured.out
    summary = json.load(open(os.path.join(out, "conversion_summary.json")))
    assert summary["image_options"]["resize"] == 16
    # Stratified 30%: 2 of the 6 listed "a" files (one is the broken one), 1 of the 5 "b".
    assert summary["splits"]["eval"]["labels"] == {"a": 2, "b": 1}
    assert sorted(os.listdir(os.path.join(out, "Split-train"))) == [
        "data_tfrecord-00000-of-00002",
        "data_tfrecord-00001-of-00002",
    ]
    assert [name for name in os.listdir(temp) if name.startswith("imgpipe")] == []


@pytest.mark.component
def test_convert_keeps_foreign_files_and_replaces_a_finished_output_only_when_told(
    tmp_path, capsys
):
    src = str(tmp_path / "src")
    imagegen.make_image_folder(src, {"a": 3, "b": 3})
    out = tmp_path / "out"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    convert = ["convert", src, str(out), "--no-progress", *IN_PROCESS]

    assert cli.main(convert) == 1
    assert f"{out / 'notes.txt'} was not written by a conversion" in capsys.readouterr().err
    assert os.listdir(out) == ["notes.txt"]

    (out / "notes.txt").unlink()
    assert cli.main(convert) == 0
    first = tree(str(out))
    assert cli.main(convert) == 1
    assert "holds a finished conversion; pass --overwrite" in capsys.readouterr().err
    assert cli.main([*convert, "--overwrite"]) == 0
    assert tree(str(out)) == first


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
