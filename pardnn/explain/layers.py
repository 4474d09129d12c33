"""Which layer of the model each node belongs to, so that an explanation speaks of the
model's layers (TF1 name scopes, Keras layer paths) and not of its 90,000 ops.

1. Names. TensorFlow wraps a layer's ops in scopes of its own: the backward pass in
   `gradients/` (`gradients_1/`, ...) or `gradient_tape/`, each op's gradient in
   `<op>_grad`, a TF1 optimizer's update of variable `layer0/w` in
   `train/update_layer0/w/`. These wrappers are dropped, so that a layer's gradient and
   update ops join the layer (`gradients/layer0/MatMul_grad/MatMul` is `layer0`'s).
2. Path. A node's path is its name's scope (all but the last component), or its whole
   name when other names live under it (the variable `layer0/w`, with `layer0/w/Read`).
3. Depth. A layer is the path's first component; a layer holding more than three
   quarters of the named nodes (a Keras model's `sequential/`, a TF1 `model/` scope)
   is split into its children, again while one holds that many (`depth` fixes the
   depth instead).
4. Optimizer scopes. A top-level scope whose ops write variables of other scopes (Keras
   3's `adam/`: one `AssignSubVariableOp` per weight, taking it as input) names no layer
   for its ops, nor does a gradient wrapper for the ops right under it (the sums of a
   variable's gradients, `gradients/AddN_7`): each takes the one layer of its colocation
   group's other members, else the one layer all its consumers have (an update flows
   into its variable's write), else the one all its producers have. What stays
   ambiguous (a learning-rate schedule all layers read) stays in its own group.
5. Keras. A traced tf.function's scopes are the layers' names made unique in its graph
   (`sequential_1/dense_2_1`); where profile.json's `variables` ties a scope to a
   variable's path (`sequential/dense_2/kernel`), the scope takes the layer's path
   (`sequential/dense_2`). A layer without variables keeps its graph scope
   (`sequential_1/dropout_1`): nothing in the profile says which Keras layer it was.

Nodes with no scope are their wrapper's (`gradients`) or the top level's. Every node
is in exactly one layer. Cost: string work per node and distinct name, then passes over
the optimizer scopes' nodes only.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass

import numpy as np

from pardnn.graph import RESIDUAL

TOP_LEVEL = "(top level)"
WRAPPERS = re.compile(r"(?P<gradients>(?:gradients(?:_\d+)?|gradient_tape)/)?(?:[^/]+/update_(?=[^/]+/))?")
GRAD_SUFFIX = re.compile(r"_grad(?=/|$)")
WRITE_OPS = ("Assign", "ResourceApply", "Apply", "ResourceSparseApply", "SparseApply", "ResourceScatter",
             "Scatter")
MAX_DEPTH = 8
SPLIT_SHARE = 0.75      # a scope holding more of the named nodes is a wrapper, split into its children


@dataclass(frozen=True)
class Layers:
    """Layer `of[n]` (an index into `names`) of every node n."""

    names: list          # str per layer, in order of first node
    of: np.ndarray       # int32 per node
    by: str              # "name scope" or "Keras layer path"

    def sums(self, values, nodes=None) -> np.ndarray:
        """Per layer, the sum of `values` (per node, or per entry of `nodes`)."""
        where = self.of if nodes is None else self.of[nodes]
        return np.bincount(where, values, minlength=len(self.names))


def find_layers(graph, profile_json=None, depth=None) -> Layers:
    """The layer of every node of `graph` (module docstring); `profile_json` is the
    profile's profile.json (its `variables` map Keras scopes to layer paths), `depth`
    a fixed scope depth (None: chosen per scope, rule 3)."""
    names, wrapped = zip(*map(unwrapped, graph.names)) if graph.num_nodes else ((), ())
    length = _path_lengths(names)
    top = [name.partition("/")[0] if k else "" for name, k in zip(names, length)]
    floating = [f or (k == 0 and w) for f, k, w in zip(_optimizer_scopes(graph, top), length, wrapped)]
    cut = {"": depth} if depth is not None else _depths(names, length, floating)
    labels = [_prefix(name, min(k, _cut(name, cut))) if k else ("gradients" if w else TOP_LEVEL)
              for name, k, w in zip(names, length, wrapped)]
    layer_names, of = _numbered(labels)
    anchors = np.array([name not in (TOP_LEVEL, "gradients") for name in layer_names], bool)
    of = _settle_floating(graph, of, np.array(floating, bool), anchors)
    renamed = _keras_paths(profile_json)
    layer_names = [renamed.get(name, name) for name in layer_names]
    layer_names, of = _used(layer_names, of)
    return Layers(layer_names, of, "Keras layer path" if renamed else "name scope")


def unwrapped(name):
    """(`name` with the wrappers of rule 1 dropped, whether it was in a gradient scope)."""
    m = WRAPPERS.match(name)
    rest = name[m.end():] if m.end() < len(name) else name
    if "_grad" in rest:
        rest = GRAD_SUFFIX.sub("", rest)
    return rest, m.group("gradients") is not None


def _path_lengths(names):
    """Per name, how many components its path has (rule 2): those of its scope, plus
    one when names live under it (it is the parent of a parent ... of some name)."""
    owners, parents = set(), {name.rpartition("/")[0] for name in names if "/" in name}
    while parents - owners:
        parents -= owners
        owners |= parents
        parents = {name.rpartition("/")[0] for name in parents if "/" in name}
    return [name.count("/") + (name in owners) for name in names]


def _prefix(name, k) -> str:
    """The first k >= 1 components of `name`."""
    return name.partition("/")[0] if k == 1 else "/".join(name.split("/", k)[:k])


def _optimizer_scopes(graph, top) -> list:
    """Per node, whether it lies in an optimizer scope (rule 4): a top-level scope one
    of whose writes (WRITE_OPS) takes a variable of another top-level scope as input."""
    writers = set()
    for n, op in enumerate(graph.ops):
        if top[n] and top[n] not in writers and op.startswith(WRITE_OPS):
            inputs = graph.predecessors(n).tolist()
            if any(graph.kind[m] == RESIDUAL and top[m] != top[n] for m in inputs):
                writers.add(top[n])
    return [t in writers for t in top]


def _depths(names, length, floating) -> dict:
    """Scope (a name prefix) -> the depth its nodes' layers are cut at, by rule 3: a
    scope holding more than SPLIT_SHARE of the named, non-floating nodes, with two
    children or more, is cut one deeper."""
    named = [(name, k) for name, k, f in zip(names, length, floating) if k and not f]
    cut, scope = {"": 1}, ""
    for level in range(1, MAX_DEPTH):
        inside = [(name, k) for name, k in named if k >= level and (not scope or name.startswith(scope + "/"))]
        counts = Counter(_prefix(name, level) for name, _ in inside)
        big = [s for s, c in counts.items() if c > SPLIT_SHARE * len(named)]
        if not big:
            break
        children = {_prefix(name, level + 1) for name, k in inside if k > level and name.startswith(big[0] + "/")}
        if len(children) < 2:
            break
        scope = big[0]
        cut[scope] = level + 1
    return cut


def _cut(name, cut) -> int:
    """How many components of `name`'s path its layer keeps: the depth of the deepest
    scope of `cut` it lies in (`cut[""]` for the rest)."""
    keep = cut[""]
    for scope, depth in cut.items():
        if scope and name.startswith(scope + "/"):
            keep = max(keep, depth)
    return keep


def _numbered(labels):
    """(distinct labels in order of first node, int32 index of each node's label)."""
    index = {}
    of = np.fromiter((index.setdefault(label, len(index)) for label in labels), np.int32, len(labels))
    return list(index), of


def _settle_floating(graph, of, floating, anchors) -> np.ndarray:
    """Rule 4: each floating node takes the one layer its colocation group, else its
    consumers, else its producers agree on, counting only settled nodes in `anchors`
    layers (not the top level's nor a wrapper's); twice over, so that what one pass
    settles can settle others in the next."""
    of = of.copy()
    if not floating.any():
        return of
    unsettled = floating.copy()
    succ_ptr, edge_dst = graph.succ_ptr.tolist(), graph.edge_dst.tolist()
    pred_ptr, pred_src = graph.pred_ptr.tolist(), graph.pred_src.tolist()
    for _ in range(2):
        for g in np.unique(graph.group[unsettled]).tolist():
            members = graph.group_members(g)
            settled = of[members[~unsettled[members]]]
            known = set(settled[anchors[settled]].tolist())
            if len(known) == 1:
                free = members[unsettled[members]]
                of[free], unsettled[free] = known.pop(), False
        for order, ptr, other in ((np.flatnonzero(unsettled)[::-1], succ_ptr, edge_dst),
                                  (np.flatnonzero(unsettled), pred_ptr, pred_src)):
            for n in order.tolist():
                if not unsettled[n]:
                    continue
                known = {int(of[m]) for m in other[ptr[n]:ptr[n + 1]] if not unsettled[m] and anchors[of[m]]}
                if len(known) == 1:
                    of[n], unsettled[n] = known.pop(), False
    return of


def _keras_paths(profile_json) -> dict:
    """Rule 5: graph scope -> Keras layer path, for every scope that profile.json's
    `variables` (graph node -> variable name) ties to one layer path, and for their
    parent scopes; {} for a TF1 profile or where no scope differs from its path."""
    variables = (profile_json or {}).get("variables")
    if not isinstance(variables, dict):
        return {}
    found = {}
    for node, variable in variables.items():
        if not isinstance(node, str) or not isinstance(variable, str):
            continue
        graph_parts = unwrapped(node)[0].split("/")
        layer = variable.split(":")[0].split("/")[:-1]
        if not layer or len(graph_parts) <= len(layer):
            continue
        if all(g == k or re.fullmatch(re.escape(k) + r"_\d+", g) for g, k in zip(graph_parts, layer)):
            for i in range(1, len(layer) + 1):
                found.setdefault("/".join(graph_parts[:i]), set()).add("/".join(layer[:i]))
    renamed = {scope: paths.pop() for scope, paths in found.items() if len(paths) == 1}
    return renamed if any(scope != path for scope, path in renamed.items()) else {}


def _used(names, of):
    """(the layers some node is in, equal names made one, in order of first node; the
    index of each node's)."""
    index = {}
    first = np.unique(of, return_index=True)[1] if len(of) else np.zeros(0, np.int64)
    order = np.argsort(first, kind="stable")
    renumber = np.zeros(len(names), np.int32)
    for i in np.unique(of)[order].tolist():
        renumber[i] = index.setdefault(names[i], len(index))
    return list(index), renumber[of]
