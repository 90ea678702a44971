"""The run options: the one documented config tree (:mod:`.tree`, plain dataclasses, the CLIs are generated from it),
the resolver that fills its defaults from the family and the model and checks them (:mod:`.resolve`), and how command
lines, YAML files and families read into it.
"""
