"""``python -m kbqe_dagster.cli``: the ``kbqe`` command without its console script."""

import sys

from kbqe_dagster.cli import main

sys.exit(main())
