"""What a placement writes and prints: the Placement and its CSV (placement.py),
report.json (report.py), all-or-nothing output folders (outputs.py) and the summary
(summary.py)."""
