"""Empty and degenerate cost graphs through the CLI: no nodes, one node, one node that
takes no time, only control edges, all nodes in one colocation group, ops that take no
time and hold nothing. `place` (every algorithm, memory unlimited and tiny), `emulate`
and `compare` give an answer (exit 0, a placement of every node) or one line on
stderr (exit 2), never a traceback."""

import json

import pytest

from pardnn.cli import main
from pardnn.placers import registry

GRAPHS = {
    "no nodes": ([], []),
    "one node": ([{"name": "a", "comp_us": 5, "out_bytes": 10}], []),
    "one idle node": ([{"name": "a"}], []),
    "only control edges": ([{"name": n, "comp_us": c} for n, c in zip("abc", (1, 2, 3))],
                           [{"src": "a", "dst": "b", "slot": -1}, {"src": "b", "dst": "c", "slot": -1}]),
    "one group": ([{"name": n, "comp_us": c, "out_bytes": 8, "group": 0} for n, c in zip("abc", (1, 2, 3))],
                  [{"src": "a", "dst": "b", "bytes": 8}, {"src": "b", "dst": "c", "bytes": 8}]),
    "nothing to do": ([{"name": "a"}, {"name": "b"}], [{"src": "a", "dst": "b"}]),
}


def write(tmp_path, name):
    nodes, edges = GRAPHS[name]
    path = tmp_path / "g.json"
    path.write_text(json.dumps({"format": "pardnn-costgraph", "version": 1, "nodes": nodes, "edges": edges}))
    return path, len(nodes)


def one_line_or_answer(code, capsys):
    err = capsys.readouterr().err
    errors = [line for line in err.splitlines() if "warning" not in line]
    assert code in (0, 2)
    if code == 2:
        assert len(errors) == 1 and "error:" in errors[0]
    else:
        assert errors == []
    return code


@pytest.mark.parametrize("name", list(GRAPHS))
@pytest.mark.parametrize("memory", [[], ["--memory", "5", "--reserve", "0"]], ids=["unlimited", "5B"])
def test_place_emulate_and_compare_answer_or_say_why_in_one_line(tmp_path, capsys, name, memory):
    path, n = write(tmp_path, name)
    devices = ["--devices", "cpu:3"]
    for algorithm in registry.names():
        out = tmp_path / algorithm
        code = one_line_or_answer(main(["place", str(path), *devices, *memory, "--algorithm", algorithm,
                                        "-o", str(out)]), capsys)
        if code == 0:
            assert len((out / "placement.csv").read_text().splitlines()) == n + 1       # header + nodes
            report = json.loads((out / "report.json").read_text())
            assert report["feasible"] and report["makespan_us"] >= 0
            one_line_or_answer(main(["emulate", str(path), "--placement", str(out / "placement.csv"),
                                     *devices, *memory, "--report", str(tmp_path / "r.json")]), capsys)
        else:
            assert not out.exists()
    one_line_or_answer(main(["compare", str(path), *devices, *memory]), capsys)
    one_line_or_answer(main(["compare", str(path), *devices, *memory, "--json"]), capsys)


def test_an_empty_graph_places_in_no_time(tmp_path, capsys):
    path, _ = write(tmp_path, "no nodes")
    assert main(["place", str(path), "--devices", "cpu:2", "-o", str(tmp_path / "out")]) == 0
    report = json.loads((tmp_path / "out" / "report.json").read_text())
    assert report["makespan_us"] == 0.0 and report["peak_memory_bytes"] == [0, 0]
    assert "0 nodes" in capsys.readouterr().out


MALFORMED = {
    "nodes not a list": ({}, [], "'nodes' must be a list, not dict"),
    "a node not an object": (["a"], [], "nodes[0] must be an object"),
    "an edge not an object": ([{"name": "a"}], ["a"], "edges[0] must be an object"),
    "a number for a name": ([{"name": 5}], [], "nodes[0].name must be a string, not 5"),
    "a number for a pin": ([{"name": "a", "pinned": 3}], [], "nodes[0].pinned must be a string"),
    "a slot too big": ([{"name": "a"}, {"name": "b"}], [{"src": "a", "dst": "b", "slot": 10**30}],
                       "edge slot 1e+30: an output index below 2**31"),
    "a slot below -1": ([{"name": "a"}, {"name": "b"}], [{"src": "a", "dst": "b", "slot": -5}],
                        "edge slot -5: give -1 (a control edge) or an output index >= 0"),
}


@pytest.mark.parametrize("name", list(MALFORMED))
def test_a_malformed_cost_graph_is_one_line_naming_the_file(tmp_path, capsys, name):
    nodes, edges, message = MALFORMED[name]
    path = tmp_path / "g.json"
    path.write_text(json.dumps({"format": "pardnn-costgraph", "version": 1, "nodes": nodes, "edges": edges}))
    for argv in (["place", str(path), "--devices", "cpu:2", "-o", str(tmp_path / "out")],
                 ["compare", str(path), "--devices", "cpu:2"]):
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert len(err.splitlines()) == 1 and f"{path}: " in err and message in err
    assert not (tmp_path / "out").exists()
