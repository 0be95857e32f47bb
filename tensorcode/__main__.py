"""``python -m tensorcode``: the same command line as the ``tensorcode`` script."""

import sys

from .cli import main

sys.exit(main())
