"""What the nightly task runs: `litmus-score nightly` with the flags the Beam operator passes.

The operator runs `python THIS_FILE --runner=R --date=D ...`; litmus-score
must be installed where the task runs (`pip install litmus-score`, with the
`gcp` extra to launch on Dataflow).
"""

import sys

from pipeline.cli import main

sys.exit(main(["nightly", *sys.argv[1:]]))
