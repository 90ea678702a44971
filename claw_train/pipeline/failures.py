"""The run's failure streaks, in one place: an env that fails every episode from the start is broken, and a
policy whose generations keep failing (though it answers its health probe) is no use; either stops the run."""

from __future__ import annotations

from claw_train.pipeline.control import RunControl
from claw_train.runlog.metrics import Stats

GENERATION_FAILURE_STREAK = 32  # episodes in a row whose generation failed (the probe answering): stop
ENV_FAILURE_STREAK = 8  # episodes in a row that fail before any succeeded: the env is broken, stop


MAX_IDLE_EPISODES = 8  # default: episodes with no action carried out, before any episode acted, that stop the run


class FailureMonitor:
    """Counts the streaks and stops the run through ``control`` when one is too long; ``max_idle_episodes``:
    episodes in a row with no action carried out, before any episode acted, that stop it (0: never)."""

    def __init__(self, control: RunControl, stats: Stats, max_idle_episodes: int = MAX_IDLE_EPISODES):
        self.control = control
        self.stats = stats
        self.max_idle_episodes = max_idle_episodes
        self.env_failures = 0
        self.env_ok = False
        self.generation_failures = 0
        self.idle_episodes = 0
        self.acted = False

    def episode_played(self, acted: bool | None) -> None:
        """An episode ended: ``acted`` whether any of its actions was carried out (``None``: not known). Until one
        acts, ``max_idle_episodes`` episodes that did not stop the run: it would train on noise."""
        if acted is None or self.acted:
            return
        if acted:
            self.acted = True
            return
        self.idle_episodes += 1
        self.stats.add("episodes_idle")
        if self.max_idle_episodes and self.idle_episodes >= self.max_idle_episodes:
            self.control.request_stop(
                "no_action",
                f"no action was carried out in any of the first {self.idle_episodes} episodes (no command ran, no "
                "tool call or answer, no GUI action): the policy does not produce this family's action format, so "
                "training would learn from noise (a named model: more --warm-start steps on the family's "
                "demonstrations; --max-idle-episodes 0 goes on anyway)",
            )

    def env_failed(self, error: str) -> None:
        """An episode failed in the env: after a streak with no success ever, the env is broken — stop."""
        self.env_failures += 1
        if not self.env_ok and self.env_failures >= ENV_FAILURE_STREAK:
            self.control.request_stop(
                "error", f"the env failed on each of the first {self.env_failures} episodes: {error}"
            )

    def env_succeeded(self) -> None:
        """An episode ran in the env: the env works, and the failure streak starts again."""
        self.env_ok = True
        self.env_failures = 0

    def generation_failed(self, err: Exception) -> None:
        """A generation failed though the policy answered its health probe; many in a row stop the run."""
        self.stats.add("generation_errors")
        self.generation_failures += 1
        if self.generation_failures >= GENERATION_FAILURE_STREAK:
            failed = f"the policy failed {self.generation_failures} episodes in a row (its health probe answered)"
            self.control.request_stop("policy_failed", f"{failed}: {err}")

    def generation_succeeded(self) -> None:
        """An episode's generations all went through: that streak starts again."""
        self.generation_failures = 0
