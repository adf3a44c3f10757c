"""`python -m pipeline ...` is the same as `litmus-score ...`."""

import sys

from pipeline.cli import main

sys.exit(main())
