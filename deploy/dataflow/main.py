"""The Flex Template's entry point: pipeline.template with the template's
parameters (--command=score|nightly, --input=..., ...) and the options
Dataflow's launcher adds, which go to Beam unchanged."""

import sys

from pipeline.template import main

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
