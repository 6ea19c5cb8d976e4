"""``python -m dse``: the same command line as the ``dse`` script, for a venv without it on PATH."""

import sys

from dse.cli.main import main

if __name__ == "__main__":
    sys.exit(main())
