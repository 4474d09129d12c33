"""Write a command's output folder as a whole, all or nothing.

Every file goes into a temporary sibling folder; only when all are written does
that folder replace the output folder in one rename, so the output folder holds
exactly what this run wrote: no file of an earlier run survives (an old
`placed_graph.pb` next to a new `placement.csv` would make `pardnn run` train the
old graph), and a failed run leaves the old folder, or none, as it was.

pardnn only replaces a folder it wrote itself: each output folder carries a
manifest, MANIFEST, listing its files. An existing folder without one that is not
empty is refused, so `-o ~/work` cannot wipe a user's files.
"""

import json
import os
import shutil
import tempfile

from pardnn.base.errors import UserError

MANIFEST = ".pardnn-output.json"


def check_output_dir(path, flag="-o", inputs=()) -> None:
    """UserError unless `path` is absent, an empty folder or a folder pardnn wrote,
    and holds none of the `inputs` (replacing it would destroy them). Commands call
    it before their real work, so a bad `-o` fails fast."""
    path = str(path)
    if not path:
        raise UserError(f"{flag}: empty path; name a folder")
    full = os.path.realpath(path)
    for item in inputs:
        if os.path.commonpath([full, os.path.realpath(str(item))]) == full:
            raise UserError(f"{flag}: {path} holds the input {item}; name another folder")
    if not os.path.exists(path):
        return
    if not os.path.isdir(path):
        raise UserError(f"{flag}: {path} exists and is not a directory")
    try:
        entries = os.listdir(path)
    except OSError as exc:
        raise UserError(f"{flag}: cannot read {path} ({exc.strerror})") from None
    if entries and MANIFEST not in entries:
        raise UserError(f"{flag}: {path} is not empty and was not written by pardnn; "
                        f"name a new or empty folder")


class OutputDir:
    """`with OutputDir(path) as out:` write each file to `out.temp(name)`."""

    def __init__(self, path, flag="-o"):
        # a link to a folder (`out` or `out/`): the folder it names is replaced, the link kept
        full = os.path.abspath(str(path))
        self.path = os.path.realpath(full) if os.path.islink(full) else full
        self.shown = str(path)
        self.flag = flag
        self.staging = None
        self.made = None         # the topmost parent folder this run created, if any
        self.names = []

    def __enter__(self):
        check_output_dir(self.shown, self.flag)
        parent = os.path.dirname(self.path)
        self.made, existing = _ancestors(parent)
        if not os.path.isdir(existing):
            raise UserError(f"{self.flag}: cannot create {self.shown} ({existing} is a file)")
        try:
            os.makedirs(parent, exist_ok=True)
            # a short name of its own, so that any folder name that fits fits here too
            self.staging = tempfile.mkdtemp(prefix=".pardnn-out.", dir=parent)
        except OSError as exc:
            self._remove_made()
            raise UserError(f"{self.flag}: cannot create {self.shown} ({exc.strerror})") from None
        return self

    def temp(self, name) -> str:
        """Where to write output file `name` (a path inside the folder: its subfolders
        are made); it lands in the output folder on success."""
        self.names.append(name)
        path = os.path.join(self.staging, name)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        return path

    def adopt(self, names) -> None:
        """Count files written to `temp(name)` paths by another process (one that
        forked from this one, whose own record of them stays there) as written."""
        known = set(self.names)
        self.names.extend(name for name in names if name not in known)

    def mark(self, folder) -> None:
        """Make subfolder `folder` (a path ending in /) an output folder of its own: a
        manifest of the files written under it so far, so that commands reading a
        pardnn output folder (`pardnn explain`, `pardnn run`) take it."""
        names = sorted(n[len(folder):] for n in self.names if n.startswith(folder))
        with open(self.temp(folder + MANIFEST), "w") as f:
            json.dump({"files": names}, f)
            f.write("\n")

    def __exit__(self, exc_type, exc, tb):
        if exc_type is not None:
            shutil.rmtree(self.staging, ignore_errors=True)
            self._remove_made()
            return False
        with open(os.path.join(self.staging, MANIFEST), "w") as f:
            json.dump({"files": sorted(self.names)}, f)
            f.write("\n")
        os.chmod(self.staging, 0o777 & ~_umask())
        if os.path.isdir(self.path):
            old = self.staging + ".old"
            os.replace(self.path, old)
            os.replace(self.staging, self.path)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(self.staging, self.path)
        return False

    def _remove_made(self):
        if self.made is not None:
            shutil.rmtree(self.made, ignore_errors=True)


def _ancestors(path):
    """(the topmost of `path` and its ancestors that does not exist, or None;
    the nearest that does)."""
    missing = None
    while not os.path.exists(path):
        missing, path = path, os.path.dirname(path)
    return missing, path


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask
