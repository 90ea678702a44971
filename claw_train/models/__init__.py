"""The models a run trains: the offline ``tiny`` model and its bootstrap, named pretrained models (``smollm2``) and
their cache, warm starts, and the presets of training settings per model size.
"""
