"""The scoring job: options, graph, command line."""
