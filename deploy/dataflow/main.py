"""The Flex Template's entry point: pipeline.template with the template's
parameters (--command=score|nightly, --input=..., ...) and the options
Dataflow's launcher adds; the runner and Beam's options are the image's."""

import sys

from pipeline.template import main

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
