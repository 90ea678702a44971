"""The online learning pipeline: four loops joined by bounded queues.

::

    policy serving ──► turn source ──turns──► judge workers ──samples──► trainer thread
         ▲  (its own worker thread)   (asyncio)    (PRM + hint, asyncio)    (blocking torch)
         └──────────────────────── weights after every optimizer step ◄───────┘

Each loop is a part that receives what it uses; :class:`~claw_train.pipeline.core.Pipeline` only wires them
(docs: "How a sample flows").

* **Serving** is the policy backend (``inprocess``: a worker thread over a serving copy of the weights;
  ``sglang``: HTTP). It never stops: new weights are swapped in between requests.
* **Turn sources** (:mod:`~claw_train.pipeline.turn_sources`, or claw-serve's live sessions) put each finished
  turn (token-exact, with its behaviour log-probs and policy version) on the turn queue
  (:mod:`~claw_train.pipeline.turns`). The personal track streams turns one by one; the agent track rolls out
  ``G`` episodes of one task and hands the whole group over, since step-index normalisation needs it. Episodes
  play wherever the run's :class:`~claw_train.pipeline.episode_runner.EpisodeRunner` plays them (here, or on a Ray
  cluster: :mod:`~claw_train.pipeline.cluster`, :mod:`~claw_train.pipeline.workers`).
* **The in-flight budget** (:mod:`~claw_train.pipeline.budget`) keeps samples within ``max_staleness`` versions:
  each turn carries its slot and whoever ends its way gives it back, once.
* **Judge workers** (:mod:`~claw_train.pipeline.judge_workers`) ask the PRM and the hint judge at once, compute the
  OPD teacher log-probs and the advantages (:class:`~claw_train.samples.making.SampleMaker`), and put ready samples on
  the sample queue. Turns that carry no gradient, infrastructure failures and steps the judge could not judge are masked
  and counted.
* **Trainer** (:mod:`~claw_train.pipeline.trainer_thread`): :class:`~claw_train.training.trainer.ClawTrainer` in a
  thread, pulling ``samples_per_step`` samples per optimizer step and publishing weights after each; evaluations
  on schedule (:mod:`~claw_train.pipeline.evaluations`).
* **Shared state** has one owner each: :class:`~claw_train.pipeline.control.RunControl` (stop reason, events, the
  trainer's step, and the one bridge between the event loop and the trainer thread),
  :class:`~claw_train.pipeline.failures.FailureMonitor` (failure streaks), :class:`~claw_train.runlog.metrics.Stats`.
* **Run directory** (:mod:`~claw_train.pipeline.rundir`): options, ledger, logs, evaluations, summary
  (:mod:`~claw_train.pipeline.reporting`).
* **Scale-out**: under ``accelerate launch`` rank 0 runs all of the above and the other ranks train on their
  share of each step (:mod:`~claw_train.pipeline.ranks`).

Queues are bounded, so a slow consumer holds its producers back and an empty queue is waited on, never
polled. ``--sync`` runs the same parts one after another (roll out, judge, train) for comparison. Bad input:
a judge that is down (its steps are masked and counted), a policy that dies (a health probe, then a clear
stop with a checkpoint), an env that fails on every episode (a stop with its error), a NaN loss (the step is
skipped and logged), Ctrl-C or SIGTERM (checkpoint, then a clean exit) (:mod:`~claw_train.pipeline.guards`).
"""

from claw_train.pipeline.core import Pipeline, PipelineResult, RunParts, TurnSource
from claw_train.pipeline.rundir import RunError
from claw_train.policy.guarded import PolicyDown
from claw_train.runlog.checkpoints import last_checkpoint

__all__ = ["Pipeline", "PipelineResult", "PolicyDown", "RunError", "RunParts", "TurnSource", "last_checkpoint"]
