"""``python -m faultbench``."""

import sys

from faultbench.cli.main import main

sys.exit(main())
