"""pardnn: place a TensorFlow dataflow graph's operations across the devices of a
machine (ParDNN, Qararyah 2020). See README.md and docs/architecture.md."""

__version__ = "0.1.0"

# The public surface is each package's __all__ (docs/architecture.md, "The public
# surface"); this one holds no API, so that `import pardnn.X` imports only X.
__all__ = ["__version__"]
