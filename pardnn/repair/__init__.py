"""ParDNN Step 2's overflow repair (thesis §4.1.2, "Addressing Overflow"): move colocation
groups off devices whose emulated memory exceeds capacity. overflow_repair.py gives a
round of moves (repair_round.py) for an emulation it is handed; footprint.py, chains.py,
knapsack.py and rangemax.py are the pieces a round uses; when the rounds are stuck,
exhaustive.py searches the placements of small graphs; least_memory.py gives the bounds
its messages cite. The pipeline's judge (pardnn.pipeline.judge) alternates rounds and
emulations; the repair imports neither the emulator nor a placer."""
