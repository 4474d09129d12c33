"""Reading the cost-graph JSON interchange format (docs/costgraph-json.md) into the
columns `CostGraph.build` takes.

Two readers give the same columns: `columns_from_dict` on a parsed document, and
`columns_from_file`, which reads a file a batch of entries at a time and keeps only
columns, so a million-node file never exists as a million dicts. The batch reader
takes only what it is sure the first reads the same way (the usual layout, with
`nodes` before `edges`, strings where strings go, numbers where numbers go); for
anything else it raises NotStreamable and the caller reads the file whole, which
gives the same graph or the same error message.
"""

import numbers
from contextlib import contextmanager
from operator import itemgetter

import numpy as np

from pardnn.base.errors import GraphError
from pardnn.base.jsonfile import NotStreamable, read_object_in_batches

KIND_NAMES = ("normal", "residual", "reference")    # in the order of the kind ids
JSON_FORMAT = "pardnn-costgraph"
JSON_VERSION = 1

_NUMBERS = {int, float}
_STRINGS = {str, type(None)}
_KIND_IDS = {None: 0, **{name: i for i, name in enumerate(KIND_NAMES)}}
_NODE_NUMBERS = (("comp_us", 0.0), ("out_bytes", 0), ("persist_bytes", 0), ("temp_bytes", 0))
_NODE_KEYS = ("name", "op", *dict(_NODE_NUMBERS), "kind", "group", "pinned")


def check_header(doc, source) -> None:
    if not isinstance(doc, dict) or doc.get("format") != JSON_FORMAT:
        raise GraphError(f"{source}: not a pardnn cost graph (missing format={JSON_FORMAT!r})")
    if doc.get("version") != JSON_VERSION:
        raise GraphError(f"{source}: unsupported cost graph version {doc.get('version')!r}"
                         f" (this pardnn reads version {JSON_VERSION})")


@contextmanager
def naming(source):
    """Errors in reading or building a graph as one GraphError naming the source."""
    try:
        yield
    except GraphError as exc:
        raise GraphError(f"{source}: {exc}") from None
    except (KeyError, TypeError, ValueError, OverflowError) as exc:
        raise GraphError(f"{source}: malformed cost graph ({type(exc).__name__}: {exc})") from None


# ------------------------------------------------------------ a parsed document
def columns_from_dict(doc) -> dict:
    """CostGraph.build's arguments from a parsed document whose header is checked."""
    nodes, edges = _entries(doc, "nodes"), _entries(doc, "edges")
    _check_numbers(nodes, "nodes", comp_us=False, out_bytes=True, persist_bytes=True, temp_bytes=True)
    _check_numbers(edges, "edges", bytes=True, slot=True)
    _check_groups(nodes)
    return dict(
        names=[_field(x, "name") for x in nodes], ops=[_field(x, "op", "") for x in nodes],
        comp_us=[_field(x, "comp_us", 0.0) for x in nodes],
        out_bytes=[_field(x, "out_bytes", 0) for x in nodes],
        persist_bytes=[_field(x, "persist_bytes", 0) for x in nodes],
        temp_bytes=[_field(x, "temp_bytes", 0) for x in nodes],
        kind=[KIND_NAMES.index(_field(x, "kind", "normal")) for x in nodes],
        group=[_field(x, "group", ("node", x["name"])) for x in nodes],
        pinned=[_field(x, "pinned", "") for x in nodes],
        edge_src=[_field(e, "src") for e in edges], edge_dst=[_field(e, "dst") for e in edges],
        edge_bytes=[_field(e, "bytes", 0) for e in edges],
        edge_slot=[_field(e, "slot", 0) for e in edges])


_REQUIRED = object()


def _check_numbers(entries, key, **integral):
    """GraphError unless each of the fields named (when present) is a JSON number, and
    a whole one where `integral[field]` (bytes, slots): a string "5", a boolean or 1.5
    bytes would otherwise be converted without a word."""
    for i, entry in enumerate(entries):
        for field, whole in integral.items():
            value = entry.get(field)
            if value is None:
                continue
            if isinstance(value, (bool, np.bool_)) or not isinstance(value, (numbers.Real, np.number)):
                raise GraphError(f"{key}[{i}].{field} must be a number, not {value!r:.40}")
            try:
                float(value)
            except OverflowError:
                raise GraphError(f"{key}[{i}].{field} too large ({str(value)[:12]}...)") from None
            if whole and not float(value).is_integer():
                raise GraphError(f"{key}[{i}].{field} must be a whole number, not {value!r}")


def _check_groups(nodes):
    """GraphError on a boolean group label: JSON's true would share a group with 1."""
    for i, entry in enumerate(nodes):
        if isinstance(entry.get("group"), (bool, np.bool_)):
            raise GraphError(f"nodes[{i}].group must be a string or an integer, not {entry['group']!r}")


def _entries(doc, key) -> list:
    """doc[key] as a list of JSON objects whose names, ends and pins are strings."""
    entries = doc[key]
    if not isinstance(entries, list):
        raise GraphError(f"{key!r} must be a list, not {type(entries).__name__}")
    for i, entry in enumerate(entries):
        if not isinstance(entry, dict):
            raise GraphError(f"{key}[{i}] must be an object, not {entry!r:.40}")
        for field in ("name", "src", "dst", "pinned"):
            if entry.get(field) is not None and not isinstance(entry[field], str):
                raise GraphError(f"{key}[{i}].{field} must be a string, not {entry[field]!r:.40}")
    return entries


def _field(entry, key, default=_REQUIRED):
    """entry[key], where a JSON null means the same as an absent key (the default);
    KeyError when a required key is absent or null."""
    value = entry.get(key)
    if value is None:
        if default is _REQUIRED:
            raise KeyError(key)
        return default
    return value


# ------------------------------------------------------------- a file, in batches
def columns_from_file(path) -> dict:
    """CostGraph.build's arguments from the file, read in batches (node names become
    edge ends' ids as the edges are read); NotStreamable where `columns_from_dict`
    on the whole file is needed to read it the same way or to say what is wrong."""
    columns = _Columns()
    header, lengths = read_object_in_batches(path, ("nodes", "edges"), columns.add)
    if (header.get("format") != JSON_FORMAT or header.get("version") != JSON_VERSION
            or set(lengths) != {"nodes", "edges"}):
        raise NotStreamable
    return columns.build_arguments()


class _Columns:
    """Columns of the nodes and the edges, grown a batch of entries at a time."""

    def __init__(self):
        self.index = {}                     # node name -> position in the file
        self.ops = {None: ""}               # one string object per op type
        self.lists = {key: [] for key in ("names", "ops", "group", "pinned")}
        self.arrays = {key: [] for key, _ in _NODE_NUMBERS}
        self.arrays.update({key: [] for key in ("kind", "edge_src", "edge_dst", "edge_bytes", "edge_slot")})

    def add(self, key, entries):
        if set(map(type, entries)) != {dict}:
            raise NotStreamable
        (self._add_nodes if key == "nodes" else self._add_edges)(entries)

    def _add_nodes(self, entries):
        cols = _columns(entries, _NODE_KEYS, also=("src", "dst"))
        names = _strings(cols["name"], required=True)
        for key in ("src", "dst", "pinned", "op"):
            _strings(cols.get(key, ()))
        start = len(self.index)
        self.index.update(zip(names, range(start, start + len(names))))
        if len(self.index) != start + len(names) or self.arrays["edge_src"]:
            raise NotStreamable                             # a duplicate name, or nodes after edges
        groups = cols["group"]
        if set(map(type, groups)) & {float, bool}:
            raise NotStreamable                     # perhaps an integer beyond 64 bits, read as a float
        if None in groups:
            groups = [("node", name) if g is None else g for g, name in zip(groups, names)]
        for key, values in (("names", names), ("ops", map(self.ops.setdefault, cols["op"], cols["op"])),
                            ("group", groups), ("pinned", (p or "" for p in cols["pinned"]))):
            self.lists[key] += values
        for key, default in _NODE_NUMBERS:
            self.arrays[key].append(_numbers(cols[key], default, whole=key != "comp_us"))
        try:
            kinds = np.fromiter(map(_KIND_IDS.__getitem__, cols["kind"]), np.int64, len(entries))
        except (KeyError, TypeError):
            raise NotStreamable from None
        self.arrays["kind"].append(kinds)

    def _add_edges(self, entries):
        cols = _columns(entries, ("src", "dst", "bytes", "slot"), also=("name", "pinned"))
        for key in ("name", "pinned"):
            _strings(cols.get(key, ()))
        for key, end in (("edge_src", "src"), ("edge_dst", "dst")):
            try:
                ids = np.fromiter(map(self.index.__getitem__, _strings(cols[end], required=True)),
                                  np.int64, len(entries))
            except KeyError:
                raise NotStreamable from None             # a dangling edge (or edges before nodes)
            self.arrays[key].append(ids)
        self.arrays["edge_bytes"].append(_numbers(cols["bytes"], 0, whole=True))
        slots = cols["slot"]
        if None in slots:
            slots = [0 if s is None else s for s in slots]
        if not (set(map(type, slots)) <= {int} and -1 <= min(slots) and max(slots) < 2**31):
            raise NotStreamable                             # build's messages, or a wrap to int32
        self.arrays["edge_slot"].append(np.array(slots, np.int64))

    def build_arguments(self) -> dict:
        out = dict(self.lists)
        for key, parts in self.arrays.items():
            dtype = np.float64 if key in ("edge_bytes", *dict(_NODE_NUMBERS)) else np.int64
            out[key] = np.concatenate(parts) if parts else np.zeros(0, dtype)
        return out


def _columns(entries, keys, also) -> dict:
    """{key: the entries' values, None where absent} for `keys`, and for the keys `also`
    unless every entry has exactly `keys` (as to_json writes them)."""
    cols, exact = {}, True
    for key in keys:
        try:
            cols[key] = list(map(itemgetter(key), entries))
        except KeyError:
            cols[key], exact = [x.get(key) for x in entries], False
    if not exact or set(map(len, entries)) != {len(keys)}:
        cols.update((key, [x.get(key) for x in entries]) for key in also)
    return cols


def _strings(values, required=False) -> list:
    """`values`, all strings (or JSON nulls, if not required)."""
    if not set(map(type, values)) <= ({str} if required else _STRINGS):
        raise NotStreamable
    return values


def _numbers(values, default, whole=False) -> np.ndarray:
    """`values` as float64 (null: the default), converted one by one as build's
    np.asarray converts a whole column; `whole`: bytes, where a fraction is an error."""
    kinds = set(map(type, values))
    if type(None) in kinds:
        values = [default if v is None else v for v in values]
        kinds = set(map(type, values))
    if not kinds <= _NUMBERS:
        raise NotStreamable                                 # build's messages on strings, booleans
    try:
        column = np.array(values, np.float64)
    except OverflowError:                                   # an integer beyond a float: its message
        raise NotStreamable from None
    if whole and float in kinds and not np.all(column == np.floor(column)):
        raise NotStreamable                                 # columns_from_dict's message on fractions
    return column
