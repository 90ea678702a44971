"""``claw/Conversation-v0``: simulated users (student, teacher, your own) with hidden preferences.

* :class:`ConversationEnv` — the environment (``env.py``)
* personas as YAML data (``personas/``, :func:`load_persona`)
* the personalization rubric (:func:`rubric`, :func:`answer_correct`, :func:`is_valid_reply`)
* signals from the user's reply text (:func:`extract_signals`)
* simulators (:class:`RulesSimulator`, :class:`LLMSimulator`)
* homework tasks (``tasks.py``: :func:`builtin_tasks`, :func:`load_gsm8k`) and demonstrations (:func:`demonstrations`;
  their hints in the one bracketed-hint format, :func:`claw_envs.messages.hinted_messages`, re-exported here)
"""

from claw_envs.conversation.demos import demonstrations, render_reply
from claw_envs.conversation.env import ConversationEnv
from claw_envs.conversation.persona import Persona, available_personas, load_persona
from claw_envs.conversation.rubric import RubricResult, rubric
from claw_envs.conversation.score import MAX_REPLY_CHARS, answer_correct, is_valid_reply
from claw_envs.conversation.signals import Signals, extract_signals
from claw_envs.conversation.simulator import LLMSimulator, Reaction, RulesSimulator, Simulator, Turn
from claw_envs.conversation.tasks import Problem, StudentWork, builtin_tasks, load_gsm8k, student_work
from claw_envs.messages import hinted_messages
from claw_envs.spec import FamilySpec, JudgeTemplates, TrainingDefaults

SPEC = FamilySpec(
    name="conversation",
    env_id="claw/Conversation-v0",
    entry_point="claw_envs.conversation.env:ConversationEnv",
    track="personal",
    judge=JudgeTemplates(prm="prm_personal", hint="hint_personal"),
    training=TrainingDefaults(
        max_new_tokens=96,
        rollout_workers=8,
        eval_every=4,
        # the tiny model's answers after 16 student updates right 49% of the time with replay, 28% without (README)
        replay=1.0,
        tokenizer_corpus=True,
        # the arithmetic: first replies to the student right 9% of the time after 500 steps, 56% after 1500
        bootstrap_steps=1500,
    ),
    load_tasks="claw_envs.conversation.tasks:load_gsm8k",
    evaluation="claw_envs.conversation.evaluation:PersonalizationEvaluation",
    live="claw_envs.conversation.live:LiveChat",
    env_options=("persona",),
    description="homework help for simulated users with hidden preferences",
)

__all__ = [
    "MAX_REPLY_CHARS",
    "SPEC",
    "ConversationEnv",
    "LLMSimulator",
    "Persona",
    "Problem",
    "Reaction",
    "RubricResult",
    "RulesSimulator",
    "Signals",
    "Simulator",
    "StudentWork",
    "Turn",
    "answer_correct",
    "available_personas",
    "builtin_tasks",
    "demonstrations",
    "extract_signals",
    "hinted_messages",
    "is_valid_reply",
    "load_gsm8k",
    "load_persona",
    "render_reply",
    "rubric",
    "student_work",
]
