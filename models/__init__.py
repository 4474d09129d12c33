"""The built-in model families (installed as the package `pardnn_models`): each script
follows the same `build(**knobs)` protocol as a user's script (pardnn.models)."""
