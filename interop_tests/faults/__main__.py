"""``python -m interop_tests.faults``: see :mod:`interop_tests.faults.cli`."""

import sys

from .cli import main

sys.exit(main())
