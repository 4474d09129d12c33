"""Reading a user's JSON file with one clear error line when it cannot be read, and
reading a big one piecewise."""

import json
import os
import re

import orjson

from pardnn.base.errors import UserError


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


class NotStreamable(Exception):
    """A file `read_object_in_batches` cannot read piecewise (not valid JSON, not an
    object, a repeated key, or an array its caller refuses): read it whole instead,
    which also gives the error message."""


_CHUNK = 1 << 19          # characters read at a time: small enough to stay in cache (docs/benchmarks.md)
_MAX_PENDING = 1 << 26    # a value other than an array longer than this is read whole
_TRIES = 8                # ends of a batch of elements tried before the file is read whole
_BLANK = re.compile(r"[ \t\n\r]*")     # JSON's whitespace
_DECODER = json.JSONDecoder()


def read_object_in_batches(path, arrays, on_batch) -> tuple:
    """The top-level JSON object in `path`, read a chunk at a time so that a big file's
    parsed elements never all exist at once: the elements of each array value of a key
    in `arrays` go to `on_batch(key, elements)` a few thousand at a time, in file order
    (decoded as json.load would, except that an integer beyond 64 bits is a float).
    Returns ({other key: its value}, {key of an array read so: its length}). Raises
    NotStreamable (and calls no further batch) where the file cannot be read this way;
    `on_batch` may raise it too."""
    try:
        with open(path) as f:
            return _read_object(_Text(f, _CHUNK), arrays, on_batch)
    except (OSError, UnicodeDecodeError):
        raise NotStreamable from None


def _read_object(text, arrays, on_batch):
    values, lengths = {}, {}
    text.expect("{")
    more = text.peek() != "}"
    while more:
        key = text.value()
        if not isinstance(key, str) or key in values or key in lengths:
            raise NotStreamable                     # json.load keeps a repeated key's last value
        text.expect(":")
        if key in arrays and text.peek() == "[":
            lengths[key] = _read_array(text, key, on_batch)
        else:
            values[key] = text.value()
        more = text.peek() == ","
        if more:
            text.expect(",")
    text.expect("}")
    if text.peek() != "":
        raise NotStreamable                         # json.load's "Extra data"
    return values, lengths


def _read_array(text, key, on_batch) -> int:
    text.expect("[")
    length = 0
    more = text.peek() != "]"
    while more:
        batch = text.elements()
        length += len(batch)
        on_batch(key, batch)
        more = text.peek() == ","
        if more:
            text.expect(",")
            if text.peek() == "]":
                raise NotStreamable                 # a trailing comma
    text.expect("]")
    return length


class _Text:
    """A text file held a chunk at a time, with a cursor."""

    def __init__(self, f, chunk):
        self.f, self.chunk, self.buf, self.pos, self.eof = f, chunk, "", 0, False

    def more(self) -> bool:
        """Append the next chunk, dropping what the cursor has passed; False at the end
        of the file or when the unread text is already too long."""
        if self.eof or len(self.buf) - self.pos > _MAX_PENDING:
            return False
        data = self.f.read(self.chunk)
        self.buf, self.pos, self.eof = self.buf[self.pos:] + data, 0, not data
        return bool(data)

    def peek(self) -> str:
        """The next non-blank character, left unread ("" at the end of the file)."""
        while True:
            self.pos = _BLANK.match(self.buf, self.pos).end()
            if self.pos < len(self.buf) or not self.more():
                return self.buf[self.pos:self.pos + 1]

    def expect(self, char):
        if self.peek() != char:
            raise NotStreamable
        self.pos += 1

    def value(self):
        """Decode the JSON value at the cursor."""
        self.peek()
        while True:
            try:
                value, end = _DECODER.raw_decode(self.buf, self.pos)
            except json.JSONDecodeError:
                if self.more():
                    continue
                raise NotStreamable from None
            if end < len(self.buf) or not self.more():      # a number may go on
                self.pos = end
                return value

    def elements(self) -> list:
        """The array's elements from the cursor up to the last '}' held that ends one,
        or up to the array's end if it is held. A '}' inside a string or a nested
        object fails to decode as the end of a list, and the '}' before it is tried;
        NotStreamable after a few failures (bad JSON, or elements longer than chunks)."""
        failures, end = 0, len(self.buf)
        while failures < _TRIES:
            cut = self.buf.rfind("}", self.pos, end) + 1
            if cut:
                try:
                    items, stop = _decode_list("[" + self.buf[self.pos:cut] + "]")
                except json.JSONDecodeError:
                    failures, end = failures + 1, cut - 1
                    continue
                self.pos += stop - 2        # past the last element, or at the array's "]"
                return items
            if not self.more():
                break
            end = len(self.buf)
        raise NotStreamable


def _decode_list(text):
    """(the list `text` starts with, where it ends in `text`). orjson decodes a whole
    list 1.5x as fast as json, and as json does except that it reads an integer beyond
    64 bits as a float; json decodes what orjson refuses (a list that ends before the
    text does, NaN, a lone surrogate)."""
    try:
        items = orjson.loads(text)
    except orjson.JSONDecodeError:
        return _DECODER.raw_decode(text)
    return items, len(text)
