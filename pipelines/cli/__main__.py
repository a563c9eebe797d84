"""`python -m imgpipe.pipelines.cli`: the imgpipe command."""

from imgpipe.pipelines.cli import run_command

run_command()
