"""Judges turn a next state into training signal: a PRM score and, optionally, an OPD hint."""

from judges.base import Judgement, Vote

__all__ = ["Judgement", "Vote"]
