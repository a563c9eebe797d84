"""Retraining from the command line, exactly as docs/cli.md writes it: one config whose
data_root is a span pattern, and `imgpipe run local --config` once per span."""

from __future__ import annotations

import pytest

from imgpipe.pipelines import cli
from tests import retraining_data

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
    (tmp_path / "images").mkdir()
    config = tmp_path / "pipeline.yaml"
    config.write_text(CONFIG.format(root=tmp_path))
    argv = ["run", "local", "--config", str(config)]

    retraining_data.span_folder(str(tmp_path / "images"), 1, per_class=12, size=32)
    assert cli.main(argv) == 0, capsys.readouterr().err
    first = data_line(capsys.readouterr().out)
    assert first.endswith("/images/span-{SPAN} (span 1)"), first

    retraining_data.span_folder(str(tmp_path / "images"), 2, per_class=12, size=32)
    assert cli.main(argv) == 0, capsys.readouterr().err
    second = data_line(capsys.readouterr().out)
    assert second.endswith("/images/span-{SPAN} (span 2)"), second
