"""The Flex Template's entry point: `litmus-score score` with the template's
parameters and the options Dataflow's launcher adds (--runner, --project,
--setup_file, ...), which go to Beam unchanged."""

import sys

from pipeline.cli import main

if __name__ == "__main__":
    sys.exit(main(["score", *sys.argv[1:]]))
