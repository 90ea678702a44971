"""From turns to training samples: the turn and sample records, and sample-making (judge, normalise, decide)."""
