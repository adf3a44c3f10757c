"""The one part of the build pyproject.toml cannot declare with setuptools 65: the optional C extension.

transforms._native reads JSON texts from Arrow's buffers (transforms/jsontext.py
is its pure-Python twin). `optional=True`: where it does not compile (no C
compiler on the machine), the package installs without it and the twin runs.
"""

from setuptools import Extension, setup

setup(ext_modules=[Extension("transforms._native", ["transforms/_native.c"], optional=True)])
