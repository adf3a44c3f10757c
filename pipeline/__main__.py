"""`python -m pipeline ...` is the same as `litmus-score ...`."""

from pipeline.cli import entry_point

entry_point()
