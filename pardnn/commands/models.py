"""`pardnn models`: list the built-in model families, their knobs and named sizes."""

from pardnn_builtin_models import FAMILIES, load_module


def add_parser(sub):
    p = sub.add_parser("models", help="list built-in model families, their knobs and sizes",
                       description="List the built-in model families, their knobs (defaults) and sizes.")
    p.set_defaults(run=run)


def run(args):
    import pardnn.tf.quiet_import  # noqa: F401  (TensorFlow quietly, before the families import it)

    for family in FAMILIES:
        module = load_module(family)
        print(f"{family}: {getattr(module, 'DESCRIPTION', '')}")
        knobs = getattr(module, "KNOBS", {})
        print("  knobs: " + ", ".join(f"{k}={v}" for k, v in knobs.items()))
        for size, values in getattr(module, "SIZES", {}).items():
            print(f"  --size {size}: " + ", ".join(f"{k}={v}" for k, v in values.items()))
    return 0
