"""Write a command's output files all or nothing.

Each file is first written under a temporary name in the output directory; only
when every file is written are they renamed into place. On failure the temporary
files (and the output directory, if this run created it) are removed, so a failed
command never leaves half-written output behind.
"""

import os
import shutil

from pardnn.errors import UserError


class OutputDir:
    def __init__(self, path, flag="-o"):
        self.path = str(path)
        self.flag = flag
        self.created = False
        self.pending = []

    def __enter__(self):
        if os.path.exists(self.path) and not os.path.isdir(self.path):
            raise UserError(f"{self.flag}: {self.path} exists and is not a directory")
        if not os.path.isdir(self.path):
            try:
                os.makedirs(self.path)
            except OSError as exc:
                raise UserError(f"{self.flag}: cannot create {self.path} ({exc.strerror})") from None
            self.created = True
        return self

    def temp(self, name) -> str:
        """A temporary path for output file `name`; renamed into place on success."""
        final = os.path.join(self.path, name)
        tmp = os.path.join(self.path, f".{name}.tmp{os.getpid()}")
        self.pending.append((tmp, final))
        return tmp

    def __exit__(self, exc_type, exc, tb):
        if exc_type is None:
            for tmp, final in self.pending:
                os.replace(tmp, final)
            return False
        for tmp, _ in self.pending:
            if os.path.exists(tmp):
                os.remove(tmp)
        if self.created:
            shutil.rmtree(self.path, ignore_errors=True)
        return False
