"""The documentation holds: every link points at a file and a heading that exist, and the
README's quick start runs as it is written."""

from __future__ import annotations

import glob
import os
import re
import shlex
import subprocess
import sys

import pytest

from imgpipe.pipelines import sample_photos

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)")
_HEADING = re.compile(r"^(#{1,6}) (.*)$")
# One command of the quick start, the slowest `run local`: the whole pipeline on 160
# photos. Measured busy: convert 38 s, stats 44 s, run local 245 s (the test's hang bound,
# the pipeline tier's 2400 s, holds the three).
QUICK_START_COMMAND_S = 1200


def markdown_files() -> list[str]:
    patterns = ["README.md", "CHANGELOG.md", "docs/**/*.md", "benchmarks/*.md", "k8s/*.md"]
    found = {
        p for pattern in patterns for p in glob.glob(os.path.join(REPO, pattern), recursive=True)
    }
    return sorted(found)


def slug(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"[`*]|\[([^\]]*)\]\([^)]*\)", r"\1", heading.strip()).lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(path: str) -> set[str]:
    found, seen, in_code = set(), {}, False
    with open(path) as f:
        for line in f:
            if line.startswith("```"):
                in_code = not in_code
            match = None if in_code else _HEADING.match(line.rstrip("\n"))
            if match:
                base = slug(match.group(2))
                count = seen.get(base, 0)
                found.add(base if count == 0 else f"{base}-{count}")
                seen[base] = count + 1
    return found


def links(path: str) -> list[str]:
    text, in_code, kept = open(path).read().split("\n"), False, []
    for line in text:
        if line.startswith("```"):
            in_code = not in_code
        elif not in_code:
            kept += _LINK.findall(line)
    return kept


@pytest.mark.unit
def test_every_page_is_found():
    pages = [os.path.relpath(p, REPO) for p in markdown_files()]
    assert "README.md" in pages and "docs/components/trainer.md" in pages


@pytest.mark.unit
@pytest.mark.parametrize("page", markdown_files(), ids=lambda p: os.path.relpath(p, REPO))
def test_no_link_points_nowhere(page):
    broken = []
    for target in links(page):
        if re.match(r"^[a-z]+:", target):  # http(s), mailto: not followed here
            continue
        file, _, anchor = target.partition("#")
        path = os.path.normpath(os.path.join(os.path.dirname(page), file)) if file else page
        if not os.path.exists(path):
            broken.append(f"{target}: no file {os.path.relpath(path, REPO)}")
        elif anchor and (os.path.isdir(path) or anchor not in anchors(path)):
            broken.append(f"{target}: no heading #{anchor} in {os.path.relpath(path, REPO)}")
    assert not broken, "\n".join(broken)


def quick_start_commands() -> list[list[str]]:
    """The `bin/imgpipe` lines of the README's quick start, without their comments."""
    readme = open(os.path.join(REPO, "README.md")).read()
    section = readme.split("## Quick start", 1)[1].split("\n## ", 1)[0]
    block = section.split("```sh\n", 1)[1].split("```", 1)[0]
    lines = [line.split("#", 1)[0].strip() for line in block.splitlines()]
    return [shlex.split(line) for line in lines if line.startswith("bin/imgpipe ")]


@pytest.mark.pipeline
def test_the_quick_start_runs_as_written(tmp_path):
    commands = quick_start_commands()
    assert [c[1] for c in commands] == ["convert", "stats", "run"]
    # `photos`, as the quick start names it: real photos in four classes.
    sample_photos.make_dataset(str(tmp_path / "photos"), per_class=40, size=64)
    # The default work folders are the user's own under TMPDIR: here, the test's.
    env = dict(os.environ, TMPDIR=str(tmp_path))
    outputs = []
    for command in commands:
        result = subprocess.run(
            [sys.executable, "-m", "imgpipe.pipelines.cli", *command[1:]],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=QUICK_START_COMMAND_S,
        )
        assert result.returncode == 0, f"{shlex.join(command)}:\n{result.stderr}"
        outputs.append(result.stdout)
    convert, stats, run = outputs
    assert re.search(r"files seen +\d+ = written \+ skipped \+ ignored", convert)
    assert (tmp_path / "report.html").exists() and "mean" in stats
    served = re.search(r"model \(served\) +(\S+/imgpipe-[^/]+/serving/\d+)", run)
    assert served, run
    # The user's work folder is under TMPDIR itself, not in the command's own temporary
    # folder (cli/temporary.py), which went when the process exited.
    assert os.path.dirname(os.path.dirname(os.path.dirname(served.group(1)))) == str(tmp_path)
    assert os.path.isdir(served.group(1))
