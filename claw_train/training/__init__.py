"""The trainer: ``ClawTrainer`` (TRL's GRPOTrainer fed from a queue), its options, the TRL adapter, batching, replay and
multi-process training.
"""
