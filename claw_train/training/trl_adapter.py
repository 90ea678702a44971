"""Everything claw uses of TRL beyond its public API, in one module.

claw's trainer is TRL's ``GRPOTrainer`` fed from a queue: it replaces one private step
(``_generate_and_score_completions``, which produces a batch) and relies on a few more private members (the
per-token log-prob helper, the metrics dict, checkpoint saving, the batch keys ``_compute_loss`` reads). These are
not stable across TRL releases, so they are reached only through :class:`FedGRPOTrainer`, the pinned version is
checked when this module is imported, and :func:`private_api_problems` (run at import, and by the contract test)
compares what claw relies on with the installed TRL — a release that moved them fails here, with a clear message,
not in the middle of a training run.
"""

from __future__ import annotations

import inspect
from typing import Any

import trl

PINNED = "1.16.0"
if trl.__version__ != PINNED:
    raise ImportError(
        f"claw's trainer is written against trl=={PINNED} (it replaces one of GRPOTrainer's private steps), but "
        f"trl {trl.__version__} is installed: pip install 'trl=={PINNED}'"
    )

from transformers import Trainer  # noqa: E402  (after the version check, which must come first)
from trl import GRPOConfig, GRPOTrainer  # noqa: E402
from trl.trainer.utils import use_adapter  # noqa: E402

BATCH_KEYS = (
    "prompt_ids",
    "prompt_mask",
    "completion_ids",
    "completion_mask",
    "advantages",
    "old_per_token_logps",
    "ref_per_token_logps",
    "num_items_in_batch",
)
"""The keys of the batch claw hands TRL (:func:`claw_train.training.batch.collate`), all read by ``_compute_loss``."""

PRIVATE_API: dict[str, tuple[Any, str, tuple[str, ...]]] = {
    "_generate_and_score_completions": (GRPOTrainer, "replaced: produces each step's batch", ("self", "inputs")),
    "_get_per_token_logps_and_entropies": (
        GRPOTrainer,
        "called: per-token log-probs of the reference model (beta > 0)",
        ("self", "model", "input_ids", "attention_mask", "logits_to_keep", "batch_size"),
    ),
    "_compute_loss": (GRPOTrainer, "called by TRL on claw's batch: the clipped surrogate", ("self", "model", "inputs")),
    "_save_checkpoint": (Trainer, "called: the last checkpoint when a run ends", ("self", "model", "trial")),
}
"""Each private member claw relies on: its class, what claw does with it, the parameters it passes (a prefix)."""


def private_api_problems() -> list[str]:
    """What of :data:`PRIVATE_API` and :data:`BATCH_KEYS` the installed TRL no longer has (empty: all there)."""
    problems = []
    for name, (cls, role, params) in PRIVATE_API.items():
        member = getattr(cls, name, None)
        if not callable(member):
            problems.append(f"{cls.__name__}.{name} is gone ({role})")
            continue
        have = tuple(inspect.signature(member).parameters)
        if have[: len(params)] != params:
            problems.append(f"{cls.__name__}.{name} takes {have}, claw passes {params} ({role})")
    source = inspect.getsource(GRPOTrainer._compute_loss)
    missing = [key for key in BATCH_KEYS if f'"{key}"' not in source]
    problems += [f"GRPOTrainer._compute_loss no longer reads inputs[{key!r}]" for key in missing]
    return problems


if problems := private_api_problems():
    raise ImportError(
        f"trl {trl.__version__} does not have what claw's trainer relies on: {'; '.join(problems)}; "
        f"pip install 'trl=={PINNED}'"
    )


class FedGRPOTrainer(GRPOTrainer):
    """``GRPOTrainer`` whose batches come from :meth:`produce_batch` instead of TRL's generation and rewards; the
    rest of TRL's private members claw uses are methods here."""

    def _generate_and_score_completions(self, inputs: list[dict[str, Any]]) -> dict[str, Any]:
        return self.produce_batch(inputs)

    def produce_batch(self, inputs: list[dict[str, Any]]) -> dict[str, Any]:
        """One step's share of this process: a dict with :data:`BATCH_KEYS` (``inputs`` are TRL's dataset rows)."""
        raise NotImplementedError

    def log_metric(self, name: str, value: float) -> None:
        """Add ``value`` to the training metric ``name`` (averaged into the step's logs, as TRL's own)."""
        self._metrics["train"][name].append(value)

    def metric_values(self, name: str) -> list[float]:
        """The values of training metric ``name`` not yet logged."""
        return list(self._metrics["train"].get(name, []))

    def per_token_logps(self, model: Any, ids: Any, mask: Any, keep: int) -> Any:
        """Per-token log-probs of the last ``keep`` tokens of ``ids`` under ``model`` (TRL's helper)."""
        return self._get_per_token_logps_and_entropies(model, ids, mask, keep, batch_size=ids.size(0))[0]

    def save_checkpoint(self) -> None:
        """Save a checkpoint of the current step, as TRL's schedule would (its callbacks' ``on_save`` included)."""
        self._save_checkpoint(self.model, trial=None)
        self.control = self.callback_handler.on_save(self.args, self.state, self.control)


__all__ = ["BATCH_KEYS", "PINNED", "FedGRPOTrainer", "GRPOConfig", "private_api_problems", "use_adapter"]
