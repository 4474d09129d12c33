"""The property tests' cases do not depend on what else is collected (tests/conftest.py's
"pardnn" profile): Hypothesis draws no literal of an imported module."""

import importlib.util
import sys

from hypothesis import given, settings, strategies as st

ODD = 918_273_645          # no strategy would draw it unless it came from a module's literals


def test_no_literal_of_an_imported_module_is_drawn(tmp_path, monkeypatch):
    path = tmp_path / "odd_constants.py"
    path.write_text(f"LIMIT = {ODD}\nNAME = 'odd-constant-name'\n")
    spec = importlib.util.spec_from_file_location("odd_constants", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    monkeypatch.setitem(sys.modules, "odd_constants", module)
    drawn = []

    @settings(max_examples=200)
    @given(st.integers(0, 10**9), st.text(max_size=20))
    def draw(i, s):
        drawn.append((i, s))

    draw()
    assert len(drawn) >= 150
    assert all(i != ODD and s != "odd-constant-name" for i, s in drawn)


def test_the_profile_is_derandomized_without_a_database():
    assert settings.default.derandomize and settings.default.database is None
