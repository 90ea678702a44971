"""The online learning pipeline: four loops joined by bounded queues.

::

    policy serving ──► turn source ──turns──► judge workers ──samples──► trainer thread
         ▲  (its own worker thread)   (asyncio)    (PRM + hint, asyncio)    (blocking torch)
         └──────────────────────── weights after every optimizer step ◄───────┘

* **Serving** is the policy backend (``inprocess``: a worker thread over a serving copy of the weights;
  ``sglang``: HTTP). It never stops: new weights are swapped in between requests.
* **Turn sources** (:mod:`~claw_train.pipeline.rollouts`, or claw-serve's live sessions) put each finished
  turn (token-exact, with its behaviour log-probs and policy version) on the turn queue. The personal track
  streams turns one by one; the agent track rolls out ``G`` episodes of one task and hands the whole group
  over, since step-index normalisation needs it. The in-flight budget (:mod:`~claw_train.pipeline.budget`)
  keeps samples within ``max_staleness`` versions.
* **Judge workers** ask the PRM and the hint judge at once, compute the OPD teacher log-probs and the
  advantages (:class:`~claw_train.judging.SampleMaker`), and put ready samples on the sample queue. Turns that
  carry no gradient, infrastructure failures and steps the judge could not judge are masked and counted.
* **Trainer** (:mod:`~claw_train.pipeline.trainer_thread`): :class:`~claw_train.trainer.ClawTrainer` in a
  thread, pulling ``samples_per_step`` samples per optimizer step and publishing weights after each.
* **Run directory** (:mod:`~claw_train.pipeline.rundir`): options, ledger, logs, evaluations, summary.
* **Scale-out**: under ``accelerate launch`` rank 0 runs all of the above and the other ranks train on their
  share of each step (:mod:`~claw_train.pipeline.ranks`); ``--ray-address`` plays the episodes on a Ray
  cluster (:mod:`~claw_train.pipeline.cluster`): env actors, or whole rollout workers with a remote policy
  (:mod:`~claw_train.pipeline.workers`).

Queues are bounded, so a slow consumer holds its producers back and an empty queue is waited on, never
polled. ``--sync`` runs the same parts one after another (roll out, judge, train) for comparison. Bad input:
a judge that is down (its steps are masked and counted), a policy that dies (a health probe, then a clear
stop with a checkpoint), an env that fails on every episode (a stop with its error), a NaN loss (the step is
skipped and logged), Ctrl-C or SIGTERM (checkpoint, then a clean exit).
"""

from claw_train.pipeline.core import Pipeline, PipelineResult, TurnSource
from claw_train.pipeline.rundir import RunError, last_checkpoint
from claw_train.policy.guarded import PolicyDown

__all__ = ["Pipeline", "PipelineResult", "PolicyDown", "RunError", "TurnSource", "last_checkpoint"]
