"""Retraining from the command line, exactly as docs/cli.md writes it: one config whose
data_root is a span pattern, and `imgpipe run local --config` once per span; and the
check before a run reads span folders as a scheduler writes them (stray names beside
them, zero-padded numbers)."""

from __future__ import annotations

import os

import pytest

from imgpipe.components.common.formats import serving_history
from imgpipe.pipelines import cli
from imgpipe.pipelines import config as cfg
from imgpipe.pipelines.cli import run
from tests import imagegen, retraining_data

# docs/cli.md's config, made small: the same keys, and tiny settings for a test.
CONFIG = """\
pipeline_name: flowers
data_root: {root}/images/span-{{SPAN}}
pipeline_root: {root}/pipeline-root
serving_dir: {root}/serving
trainer:
  {{image_size: 32, batch_size: 8, epochs: 1, train_steps: 8, eval_steps: 1, tensorboard_images: 0}}
example_gen: {{output: {{num_shards: 1}}}}
beam_args: [--direct_num_workers=1, --direct_running_mode=in_memory]
"""


def data_line(out: str) -> str:
    return next(line for line in out.splitlines() if line.startswith("data "))


@pytest.mark.pipeline
def test_two_spans_two_run_local_calls_with_the_same_config(tmp_path, capsys):
    """Two spans, one `imgpipe run local` each; then the second span's other photos land
    with a third span, and the next call reads the second again, whole, then the third."""
    (tmp_path / "images").mkdir()
    config = tmp_path / "pipeline.yaml"
    config.write_text(CONFIG.format(root=tmp_path))
    argv = ["run", "local", "--config", str(config)]

    retraining_data.span_folder(str(tmp_path / "images"), 1, per_class=12, size=32)
    assert cli.main(argv) == 0, capsys.readouterr().err
    out = capsys.readouterr().out
    first = data_line(out)
    assert first.endswith("/images/span-{SPAN} (span 1)"), first
    steps = [line.split()[1:3] for line in out.splitlines() if line.startswith("step ")]
    assert steps[:2] == [["ImageExampleGen", "started"], ["ImageExampleGen", "done"]], out
    assert steps[-1] == ["Pusher", "done"] and len(steps) == 2 * len({s[0] for s in steps}), out

    first_model = next(line for line in out.splitlines() if line.startswith("model (trained)"))
    retraining_data.span_folder(str(tmp_path / "images"), 2, per_class=12, size=32)
    assert cli.main(argv) == 0, capsys.readouterr().err
    out = capsys.readouterr().out
    second = data_line(out)
    assert second.endswith("/images/span-{SPAN} (span 2)"), second
    # The end of the run collected the first run's model (a push holds it), not span 1's
    # Examples, which the window trains on.
    assert "retention            deleted " in out, out
    assert not os.path.exists(first_model.split()[-1])
    # Nor does TFX's launcher leave a folder a step a run under <step>/.system/.
    root = tmp_path / "pipeline-root"
    assert [str(p) for p in root.glob("*/.system/*/*")] == []

    # Span 2 was still landing when that run read it: its other photos came with span 3.
    # The next run reads span 2 again, whole, then span 3.
    retraining_data.span_folder(str(tmp_path / "images"), 2, per_class=18, size=32)
    retraining_data.span_folder(str(tmp_path / "images"), 3, per_class=12, size=32)
    assert cli.main(argv) in (0, run.NOT_PUSHED_EXIT_CODE), capsys.readouterr().err
    out = capsys.readouterr().out
    assert out.splitlines()[:2] == [
        "spans                span 2 changed after a run read it (36 files then, 54 now: "
        "still landing when it was read, or replaced since); it is read again, first",
        "span 2",
    ], out
    read_again, third = out.split("\nspan 3\n")
    assert "images               54 written of 54 files seen" in read_again, out
    assert "spans trained        spans 3, 2, 1" in third, out
    assert "spans trained        spans 2, 1" in out, out

    # A run that fails says why in one line, and the history keeps it: the step, the span.
    retraining_data.span_folder(str(tmp_path / "images"), 4, per_class=12, size=32)
    weights = tmp_path / "bad.weights.h5"
    weights.write_bytes(b"not a weights file")
    assert cli.main([*argv, "--set", f"trainer.weights={weights}"]) == 1
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith(f"imgpipe: error: backbone weights file {weights}: Keras cannot load"), (
        line
    )
    decisions, _ = serving_history.read(str(tmp_path / "serving"))
    assert (decisions[-1].kind, decisions[-1].span) == (serving_history.FAILED, 4)
    assert decisions[-1].reason.startswith(f"Trainer failed: backbone weights file {weights}")
    assert decisions[-1].served_version == decisions[-2].served_version


def spans(root, *names: str) -> str:
    """root/<name>/{a,b}/*.jpg for each name: a span of two classes."""
    for name in names:
        imagegen.make_image_folder(str(root / name), {"a": 2, "b": 2})
    return str(root)


def check(data: str) -> str:
    """The folder run local's check before the pipeline reads, for `--data DATA`."""
    return run.check_data(cfg.from_dict({"data_root": data}), f"--data {data}", data)


@pytest.mark.unit
def test_a_stray_folder_and_a_file_beside_the_spans_are_named_in_a_warning(tmp_path, capsys):
    root = spans(tmp_path, *(f"span-{n}" for n in range(1, 7)))
    os.makedirs(tmp_path / "span-x")
    (tmp_path / "notes.txt").write_text("the spans")
    data = f"{root}/span-{{SPAN}}"

    assert check(data) == os.path.join(root, "span-6")

    assert capsys.readouterr().out.splitlines() == [
        f"warning: --data {data}: ignored in {root}: notes.txt and span-x (not named as "
        "span-{SPAN} says); span 6 is read, from span-6"
    ]


@pytest.mark.unit
@pytest.mark.parametrize("pattern", ["span-{SPAN}", "span-{SPAN:3}"])
def test_zero_padded_span_folders_are_read_as_they_are_named(tmp_path, capsys, pattern):
    root = spans(tmp_path, "span-005", "span-007")
    assert check(f"{root}/{pattern}") == os.path.join(root, "span-007")
    assert capsys.readouterr().out == ""


@pytest.mark.unit
def test_a_pattern_that_matches_nothing_is_one_line_naming_the_folders(tmp_path, capsys):
    root = spans(tmp_path, "span-1", "span-2")
    os.makedirs(tmp_path / "span-x")
    data = f"{root}/span-{{SPAN:3}}"

    assert cli.main(["run", "local", "--data", data]) == 1

    assert capsys.readouterr().err.splitlines() == [
        f"imgpipe: error: --data {data}: no folder in {root} matches span-{{SPAN:3}} (it holds "
        f"span-1, span-2 and span-x); put each span in a folder of {root} named as the "
        "pattern says (span-001, ...)"
    ]
