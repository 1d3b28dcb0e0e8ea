"""`python -m cli ARGS...` is `marathon ARGS...`."""

import sys

from cli.main import main

sys.exit(main())
