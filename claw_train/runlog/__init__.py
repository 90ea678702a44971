"""What a run leaves: per-version logs of every turn and decision, metrics and counters, the learning curve, progress
lines, checkpoint names.
"""
