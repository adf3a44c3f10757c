"""litmus-score: commit-time adjudication of AI-agent tool calls.

The import names the distribution installs are three: `pipeline` (the job:
options, graph, command line), `transforms` (its stages, one composite
PTransform each) and this package, which holds the rest:

    litmus_score.scoring    the rules, pure (no Beam, no pyarrow): the one statement of the semantics
    litmus_score.importers  agent logs (Inspect AI, AgentDojo, OpenTelemetry) -> contract shards
    litmus_score.report     report.html: reads a run's documents, computes no score
    litmus_score.synthetic  synthetic trajectory shards for demos, tests and benchmarks
"""
