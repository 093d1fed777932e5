"""``python -m faultbench``."""

import sys

from faultbench.cli import main

sys.exit(main())
