"""ParDNN Step 2's overflow repair (thesis §4.1.2, "Addressing Overflow"): move colocation
groups off devices whose emulated memory exceeds capacity. overflow_repair.py runs rounds
(repair_round.py) between emulations; footprint.py, chains.py, knapsack.py and
rangemax.py are the pieces a round uses; when the rounds are stuck, exhaustive.py searches
the placements of small graphs; least_memory.py gives the bounds its messages cite. It
judges with pardnn.emulator and imports no placer."""
