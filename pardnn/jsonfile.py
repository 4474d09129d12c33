"""Reading a user's JSON file with one clear error line when it cannot be read."""

import json
import os

from pardnn.errors import UserError


def read_json(path, error=UserError, prefix=""):
    """The parsed contents of `path`; `error(prefix + message)` when unreadable or not JSON."""
    try:
        with open(path) as f:
            return json.load(f)
    except OSError as exc:
        raise error(f"{prefix}{path}: cannot read ({exc.strerror})") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise error(f"{prefix}{path}: not valid JSON ({exc})") from None


def write_json(doc, path) -> None:
    """Write JSON to path through a temporary file and a rename."""
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "w") as f:
        json.dump(doc, f, indent=2)
        f.write("\n")
    os.replace(tmp, path)
