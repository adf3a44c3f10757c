"""The pipeline's stages, one composite PTransform per module."""

# Every Beam metric of the pipeline lives under this namespace.
NAMESPACE = "litmus_score"
