"""Planning: packs of trials, the memory they declare, how many fit, what a study will cost."""
