"""What the nightly task runs: `litmus-score nightly` with the flags the Beam operator passes.

The operator runs `PYTHON THIS_FILE --runner=R --date=D ...` with the python of
the environment the DAG's `environment` param names, which has litmus-score
installed (`pip install 'litmus-score[gcp]'` to launch on Dataflow); see
docs/runners.md, "Nightly on Airflow".
"""

import sys

from pipeline.cli import entry_point

entry_point(["nightly", *sys.argv[1:]])
