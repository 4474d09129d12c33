"""Writes docs/report.md from the fields of pardnn.pipeline.report.Report, so the page
and the report cannot drift apart (tests/test_report.py checks the page is current).

    python -m tools.report_doc          # rewrite docs/report.md
"""

from __future__ import annotations

import os

from pardnn.pipeline.report import doc_table

PAGE = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "docs", "report.md")

HEAD = """# report.json: what a placement costs

`pardnn place` writes `OUT_DIR/report.json`; `pardnn emulate --report` writes the same
placement and emulation fields for a given placement (they agree exactly for the same
placement). Times are microseconds, sizes bytes, lists have one entry per device in the
order of `devices`. One typed report, `Report` in `pardnn/pipeline/report.py`, is
assembled there (`placement_report`, `emulation_report`) and written as JSON; a field is
written only when the code computed it, never faked.

This page is made from the fields' own docs by `python -m tools.report_doc`.

"""

TAIL = """
Only the wall times depend on the machine: with no `--time-budget`, the same input
gives the same placement and the same other fields on any machine.
"""


def page() -> str:
    return HEAD + doc_table() + TAIL


def main() -> int:
    with open(PAGE, "w", encoding="utf-8") as f:
        f.write(page())
    print(f"wrote {PAGE}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
