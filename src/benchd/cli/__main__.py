"""`python -m benchd.cli`: the benchd command."""

import sys

from benchd.cli.main import main

sys.exit(main())
