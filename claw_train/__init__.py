"""claw_train: policy serving, rollouts, advantages and the TRL-based online trainer.

Heavy dependencies (torch, transformers, trl) are imported by the modules that need them, never here.
"""
