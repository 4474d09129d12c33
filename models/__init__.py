"""The built-in model families: each script follows the same `build(**knobs)` protocol
as a user's script (pardnn.models), and `load_module` finds a family by name or a
user's script by path for `pardnn profile`, `pardnn run` and `pardnn models`."""

from __future__ import annotations

import importlib
import importlib.util
import os

from pardnn.base.errors import UserError
from pardnn.models import USER_MODULE

__all__ = ["FAMILIES", "load_module"]

# Family name -> its module (imported on first use: each imports TensorFlow).
FAMILIES = {
    "mlp": "pardnn_builtin_models.mlp",
    "word-rnn": "pardnn_builtin_models.word_rnn",
    "char-crn": "pardnn_builtin_models.char_crn",
    "wrn": "pardnn_builtin_models.wrn",
    "transformer": "pardnn_builtin_models.transformer",
    "e3d": "pardnn_builtin_models.e3d",
}


def load_module(family: str):
    """The module for a built-in family name or a path to a user's script."""
    if not isinstance(family, str):
        raise UserError(f"MODEL: {family!r} is neither a model family nor a script path")
    if family.endswith(".py") or os.sep in family:
        if not os.path.isfile(family):
            raise UserError(f"MODEL: {family} does not exist")
        spec = importlib.util.spec_from_file_location(USER_MODULE, family)
        if spec is None:
            raise UserError(f"MODEL: {family} is not a Python script (name it .py); "
                            f"a cost graph or profile is placed with `pardnn place`")
        module = importlib.util.module_from_spec(spec)
        try:
            spec.loader.exec_module(module)
        except Exception as exc:   # a user's script: report, don't crash
            raise UserError(f"MODEL: {family} failed to import ({type(exc).__name__}: {exc})") from None
        except SystemExit as exc:  # sys.exit() at import: pardnn's own exit code and line instead
            raise UserError(f"MODEL: {family} called sys.exit({exc.code!r}) at import") from None
        if not callable(getattr(module, "build", None)):
            raise UserError(f"MODEL: {family} defines no build(**knobs) function")
        return module
    if family not in FAMILIES:
        raise UserError(f"MODEL: unknown model family {family!r} (choose from {', '.join(FAMILIES)}, "
                        f"or give a path to a script defining build(**knobs))")
    return importlib.import_module(FAMILIES[family])
