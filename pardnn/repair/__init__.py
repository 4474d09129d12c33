"""ParDNN Step 2's overflow repair (thesis §4.1.2, "Addressing Overflow"): move colocation
groups off devices whose emulated memory exceeds capacity. overflow_repair.py runs rounds
(repair_round.py) between emulations; footprint.py, chains.py, knapsack.py and
rangemax.py are the pieces a round uses. It judges with pardnn.emulator and imports
no placer."""
