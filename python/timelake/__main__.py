"""`python -m timelake …` is the `timelake` command (see timelake/cli.py)."""

import sys

from .cli import main

sys.exit(main())
