"""Output folders (`-o`): replaced as a whole, foreign folders refused, nothing
half-written (pardnn.io.outputs)."""

import json

import pytest

from pardnn.cli import main
from pardnn.base.errors import UserError
from pardnn.io.outputs import MANIFEST, OutputDir


def place(chain_json, out, *extra):
    return main(["place", str(chain_json), "--devices", "cpu:2", "--algorithm", "round-robin",
                 "-o", str(out), *extra])


def listing(folder):
    return sorted(p.name for p in folder.iterdir())


def snapshot(folder):
    return {p.name: p.read_bytes() for p in folder.iterdir()}


def test_reused_folder_keeps_no_file_of_an_earlier_run(chain_json, tmp_path):
    out = tmp_path / "out"
    assert place(chain_json, out) == 0
    # what an earlier placement of a TF profile left there
    (out / "placed_graph.pb").write_bytes(b"old graph")
    (out / "profile.json").write_text("{}")
    assert place(chain_json, out) == 0
    assert listing(out) == [MANIFEST, "inputs.json", "placement.csv", "report.json", "tensorboard", "trace.json"]


def test_a_folder_pardnn_did_not_write_is_refused_and_untouched(chain_json, tmp_path, capsys):
    out = tmp_path / "mine"
    out.mkdir()
    (out / "notes.txt").write_text("keep me")
    assert place(chain_json, out) == 2
    err = capsys.readouterr().err
    assert err == f"pardnn place: error: -o: {out} is not empty and was not written by pardnn; name a new or empty folder\n"
    assert snapshot(out) == {"notes.txt": b"keep me"}
    assert listing(tmp_path) == ["g.json", "mine"]


def test_an_empty_folder_is_used(chain_json, tmp_path):
    out = tmp_path / "empty"
    out.mkdir()
    assert place(chain_json, out) == 0
    assert listing(out) == [MANIFEST, "inputs.json", "placement.csv", "report.json", "tensorboard", "trace.json"]


@pytest.mark.parametrize("name, message", [
    ("file.txt", "exists and is not a directory"),
    ("file.txt/out", "cannot create"),
    ("g.json", "holds the input"),
])
def test_bad_output_paths_exit_2_with_one_line(chain_json, tmp_path, capsys, name, message):
    (tmp_path / "file.txt").write_text("a file")
    out = tmp_path / name
    before = snapshot(tmp_path)
    assert place(chain_json, out) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "-o: " in err and str(out) in err and message in err
    assert snapshot(tmp_path) == before


def test_an_empty_output_path_is_refused_and_the_current_folder_untouched(chain_json, tmp_path, capsys,
                                                                         monkeypatch):
    work = tmp_path / "work"
    work.mkdir()
    (work / "precious.txt").write_text("mine")
    monkeypatch.chdir(work)
    assert place(chain_json, "") == 2
    assert "-o: empty path" in capsys.readouterr().err
    assert listing(work) == ["precious.txt"]


def test_a_cluster_file_is_an_input_no_output_replaces(chain_json, tmp_path, capsys):
    from pardnn.hardware import cluster_file, parse_devices
    folder = tmp_path / "pd"
    assert place(chain_json, folder) == 0                     # a folder pardnn wrote
    cluster = folder / "cluster.json"
    cluster_file.save(parse_devices("cpu:2"), str(cluster))
    before = cluster.read_bytes()
    assert main(["place", str(chain_json), "--devices", str(cluster), "-o", str(folder)]) == 2
    assert "holds the input" in capsys.readouterr().err
    placement = folder / "placement.csv"
    assert main(["emulate", str(chain_json), "--devices", str(cluster), "--placement", str(placement),
                 "--report", str(cluster)]) == 2
    assert "would overwrite or go into the input" in capsys.readouterr().err
    assert cluster.read_bytes() == before


def test_two_outputs_to_one_file_are_refused(chain_json, tmp_path, capsys):
    out = tmp_path / "placed"
    assert place(chain_json, out) == 0
    same = tmp_path / "same.json"
    assert main(["emulate", str(chain_json), "--devices", "cpu:2", "--placement", str(out / "placement.csv"),
                 "--report", str(same), "--trace", str(same)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--trace: " in err and "is also --report's file" in err
    assert not same.exists()
    assert main(["emulate", str(chain_json), "--devices", "cpu:2", "--placement", str(out / "placement.csv"),
                 "--report", ""]) == 2
    assert "--report: empty path" in capsys.readouterr().err


def test_an_output_folder_holding_the_input_is_refused(chain_json, tmp_path, capsys):
    assert place(chain_json, tmp_path) == 2
    assert f"-o: {tmp_path} holds the input {chain_json}" in capsys.readouterr().err
    assert listing(tmp_path) == ["g.json"]


def test_a_failed_run_leaves_the_old_folder_as_it_was(tmp_path):
    out = tmp_path / "out"
    with OutputDir(out) as o:
        open(o.temp("a.txt"), "w").write("first")
    with pytest.raises(RuntimeError):
        with OutputDir(out) as o:
            open(o.temp("a.txt"), "w").write("half")
            raise RuntimeError("crash while writing")
    assert (out / "a.txt").read_text() == "first"
    assert json.loads((out / MANIFEST).read_text()) == {"files": ["a.txt"]}
    assert listing(tmp_path) == ["out"]


def test_a_failed_first_run_leaves_no_folder(tmp_path):
    with pytest.raises(RuntimeError):
        with OutputDir(tmp_path / "new" / "deeper" / "out") as o:
            open(o.temp("a.txt"), "w").write("half")
            raise RuntimeError("crash while writing")
    assert listing(tmp_path) == []


def test_a_folder_the_system_refuses_to_create_is_a_user_error(tmp_path):
    # a name over the file system's 255-byte limit fails for root too (a read-only
    # parent would not: root writes anywhere); the folder made on the way is removed
    with pytest.raises(UserError, match=r"cannot create .* \(File name too long\)"):
        with OutputDir(tmp_path / "new" / ("x" * 300) / "out"):
            pass
    assert listing(tmp_path) == []


def test_a_link_to_an_output_folder_is_kept_and_its_folder_replaced(chain_json, tmp_path):
    real, link = tmp_path / "real", tmp_path / "out"
    link.symlink_to(real.name)
    assert place(chain_json, link) == 0 and place(chain_json, link) == 0
    assert place(chain_json, f"{link}/") == 0                      # as tab completion writes it
    assert link.is_symlink() and listing(real) == [MANIFEST, "inputs.json", "placement.csv", "report.json", "tensorboard",
                                                  "trace.json"]
    assert listing(tmp_path) == ["g.json", "out", "real"]          # no staging folder left behind


def test_an_output_folder_with_a_long_name_is_replaced_again(chain_json, tmp_path):
    out = tmp_path / ("a" * 240)
    assert place(chain_json, out) == 0 and place(chain_json, out) == 0
    assert listing(tmp_path) == ["a" * 240, "g.json"]


def test_files_another_process_wrote_are_adopted_once(tmp_path):
    """Files a forked process wrote to temp() paths count once adopted (its own record
    of them stayed there); names this process wrote already are not listed twice."""
    import os
    out = tmp_path / "out"
    with OutputDir(out) as o:
        open(o.temp("k1/a.txt"), "w").write("here")
        pid = os.fork()
        if pid == 0:                                    # the other process: writes, records, exits
            open(o.temp("k2/b.txt"), "w").write("there")
            os._exit(0)
        os.waitpid(pid, 0)
        o.adopt(["k2/b.txt", "k1/a.txt"])
        o.mark("k2/")
    assert json.loads((out / MANIFEST).read_text()) == {"files": ["k1/a.txt", "k2/.pardnn-output.json", "k2/b.txt"]}
    assert json.loads((out / "k2" / MANIFEST).read_text()) == {"files": ["b.txt"]}
    assert (out / "k2" / "b.txt").read_text() == "there"
