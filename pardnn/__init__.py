"""pardnn: place a TensorFlow dataflow graph's operations across the devices of a
machine (ParDNN, Qararyah 2020). See README.md and docs/architecture.md."""

__version__ = "0.1.0"
