"""`python -m pipeline.nightly_job FLAGS` is `litmus-score nightly FLAGS`.

The Airflow DAG (deploy/airflow) runs it with the Beam operator, which puts its
flags right after the module it runs (`python -m MODULE --runner=R --date=D ...`)
and has no place for a subcommand. Being part of litmus-score, it runs in
litmus-score's environment: nothing but the DAG goes into Airflow's dags folder,
whose interpreter has no litmus-score to import (docs/runners.md, "Nightly on Airflow").
"""

import sys

from pipeline.cli import entry_point

entry_point(["nightly", *sys.argv[1:]])
