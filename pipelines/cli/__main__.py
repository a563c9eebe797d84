"""`python -m imgpipe.pipelines.cli`: the imgpipe command."""

import sys

from imgpipe.pipelines.cli import main

sys.exit(main())
