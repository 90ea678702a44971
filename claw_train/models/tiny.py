"""The offline ``tiny`` model: a byte-level BPE tokenizer and a small Qwen3 model, built on this machine.

Nothing is downloaded. :func:`build_tiny` trains a tokenizer with the ``tokenizers`` library on text
this module generates (plus the built-in families' demonstrations), sets a Qwen3-style chat template
with tool calling (the Qwen3-Instruct-2507 template TRL ships), initialises a small ``Qwen3Config``
model and saves both in Hugging Face format, so ``AutoModelForCausalLM.from_pretrained(path)`` loads
it exactly like ``Qwen/Qwen3-4B``. :func:`bootstrap` then trains it briefly (supervised, completion
tokens only) on one family's demonstrations so it speaks the action format, varies its style and
follows hints in its context.

Both are cached under ``~/.cache/claw/tiny/<content hash>`` (``CLAW_TINY_CACHE`` moves the root): the
hash covers the tokenizer corpus, the model config, the chat template, the demonstration data, the
training settings and this file's source, so a build is redone exactly when one of them changes. The
data's digest is remembered by the code that makes it (:mod:`claw_train.models.digest_memo`): a process that finds the
model cached does not regenerate its data. A file lock keeps two processes from building the same thing at once.
"""

from __future__ import annotations

import functools
import hashlib
import json
import math
import os
import random
import time
import warnings
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from claw_train.models.cache import cached_build
from claw_train.models.digest_memo import demonstration_makers, fingerprint, remembered

SPECIAL_TOKENS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")
"""Control tokens (skipped by ``decode(..., skip_special_tokens=True)``)."""

MARKUP_TOKENS = ("<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>", "<think>", "</think>")
"""Single tokens that stay in decoded text, as in Qwen3's vocabulary."""

EOS_TOKEN = "<|im_end|>"
PAD_TOKEN = "<|endoftext|>"
CHAT_TEMPLATE_FILE = "qwen3_instruct_2507.jinja"

# Qwen-style pre-tokenisation: contractions, letter runs, single digits, punctuation runs, whitespace.
PRETOKENIZE_PATTERN = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)

DEFAULT_CACHE_ROOT = Path("~/.cache/claw/tiny")


@dataclass(frozen=True)
class TinySpec:
    """The tokenizer and model shape of ``tiny`` (about 1M parameters with tied embeddings)."""

    vocab_size: int = 2048
    hidden_size: int = 128
    intermediate_size: int = 384
    num_hidden_layers: int = 4
    num_attention_heads: int = 4
    num_key_value_heads: int = 2
    head_dim: int = 32
    max_position_embeddings: int = 4096
    init_seed: int = 0


@dataclass(frozen=True)
class BootstrapSettings:
    """Supervised bootstrap on demonstrations: AdamW over completion tokens only.

    At most ``demonstrations`` rows are drawn, and no more than the steps consume, so by default each
    row is seen once. The first ``lead_tokens`` completion tokens, where a reply's style is decided,
    weigh ``lead_weight`` in the loss, which sharpens the switch between styles when a hint is present.
    """

    steps: int = 500
    batch_size: int = 16
    lr: float = 3e-3
    warmup: int = 20
    weight_decay: float = 0.01
    max_length: int = 768
    demonstrations: int = 24000
    seed: int = 0
    lead_tokens: int = 3
    lead_weight: float = 4.0


class NoDemonstrations(ValueError):
    """The family has no demonstrations to bootstrap on (its env does not implement ``demonstrations``)."""


# -- public API ------------------------------------------------------------------------------


def build_tiny(cache_dir: str | os.PathLike[str] | None = None, *, spec: TinySpec = TinySpec()) -> Path:
    """Build (or find in the cache) the untrained tiny model and tokenizer; returns its directory.

    The directory holds ``config.json``, ``model.safetensors``, ``generation_config.json`` and the
    tokenizer files; load it with ``AutoModelForCausalLM.from_pretrained`` / ``AutoTokenizer.from_pretrained``.
    """
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    root = _cache_root(cache_dir)
    template = chat_template()
    corpus = remembered(root, _corpus_fingerprint(), lambda: _digest(list(tokenizer_corpus())))
    key = _digest({"kind": "base", "spec": asdict(spec), "corpus": corpus, "template": template, "src": _source()})
    return cached_build(
        root, f"base-{key}", lambda out: _build_base(out, tokenizer_corpus(), template, spec), marker=MARKER
    )


def bootstrap(
    family: str,
    *,
    steps: int | None = None,
    cache_dir: str | os.PathLike[str] | None = None,
    progress: bool = True,
    settings: BootstrapSettings = BootstrapSettings(),
    spec: TinySpec = TinySpec(),
    threads: int | None = None,
) -> Path:
    """The tiny model after a short supervised bootstrap on ``family``'s demonstrations; returns its directory.

    ``family`` is a family name (``conversation``) or an env id (``claw/Conversation-v0``); ``steps``
    overrides ``settings.steps`` (tests use a few). Cached like :func:`build_tiny`. ``threads`` is the
    torch thread count while training (``None``: the cores the last minute's load left idle, 1 to 4; on a
    busy CPU extra threads wait on each other and run slower than one); it is not part of the cache key.
    """
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    if steps is not None:
        if steps < 0:
            raise ValueError(f"steps must be >= 0, got {steps}")
        settings = BootstrapSettings(**{**asdict(settings), "steps": steps})
    base = build_tiny(cache_dir, spec=spec)
    env_id = _resolve_family(family)
    wanted = min(settings.demonstrations, max(1, settings.steps) * settings.batch_size)
    root = _cache_root(cache_dir)
    made: list[dict[str, Any]] = []  # generated only when the digest is not remembered or the model is built

    def examples() -> list[dict[str, Any]]:
        if not made:
            made.extend(demonstrations(env_id, wanted, settings.seed))
        return made

    makers = fingerprint(_maker_files(env_id), kind="demonstrations", env=env_id, n=wanted, seed=settings.seed)
    data = remembered(root, makers, lambda: _digest(examples()))
    key = _digest({"kind": "bootstrap", "base": base.name, "env": env_id, "data": data, "settings": asdict(settings)})
    name = f"{env_id.split('/')[-1].split('-')[0].lower()}-{key}"
    return cached_build(
        root,
        name,
        lambda out: _train(base, out, examples(), settings, env_id, progress=progress, threads=threads),
        marker=MARKER,
    )


def idle_cores(limit: int = 4) -> int:
    """This process's cores less those the last minute's load average kept fully busy: at least 1, at most
    ``limit`` (a model this small gains little past a few threads)."""
    cores = len(os.sched_getaffinity(0))
    return max(1, min(limit, cores - math.floor(os.getloadavg()[0])))


def demonstrations(env_id: str, n: int, seed: int = 0) -> list[dict[str, Any]]:
    """``n`` demonstrations from ``env_id`` (``messages``, ``completion`` and any extra fields), made JSON-safe."""
    import gymnasium as gym

    import claw_envs  # noqa: F401  (registers the claw/ ids)

    env = gym.make(env_id)
    try:
        rows = env.unwrapped.demonstrations(n, seed)
    except NotImplementedError as err:
        raise NoDemonstrations(f"{env_id} has no demonstrations: {err}") from None
    finally:
        env.close()
    if not rows:
        raise ValueError(f"{env_id} returned no demonstrations")
    for i, row in enumerate(rows):
        if not isinstance(row.get("messages"), list) or not isinstance(row.get("completion"), str):
            raise ValueError(f"{env_id} demonstration {i} needs 'messages' (list) and 'completion' (str)")
    return json.loads(json.dumps(rows, default=str))


def chat_template() -> str:
    """The Qwen3-style chat template with tool calling (Qwen3-Instruct-2507's, as shipped inside TRL)."""
    from importlib.resources import files

    return (files("trl") / "chat_templates" / CHAT_TEMPLATE_FILE).read_text(encoding="utf-8")


@functools.lru_cache(maxsize=1)
def tokenizer_corpus() -> tuple[str, ...]:
    """The text the tokenizer is trained on: generated prose, markdown, code, tool calls and the
    demonstrations of the families whose spec asks for it (``tokenizer_corpus``), in registration order.
    Deterministic (computed once per process)."""
    from claw_train.models.tiny_text import generated_text

    texts = generated_text()
    import claw_envs

    for env_id in [s.env_id for s in claw_envs.registry.specs() if s.training.tokenizer_corpus]:
        try:
            rows = demonstrations(env_id, 300, seed=0)
        except Exception as err:  # a broken family must not break the tiny model; its text is just missing
            warnings.warn(f"tiny tokenizer corpus: no demonstrations from {env_id}: {err}", stacklevel=2)
            continue
        for row in rows:
            texts.extend(str(m.get("content", "")) for m in row["messages"])
            texts.append(row["completion"])
    return tuple(texts)


# -- building --------------------------------------------------------------------------------


def _build_base(out: Path, corpus: Sequence[str], template: str, spec: TinySpec) -> None:
    import torch
    from transformers import GenerationConfig, PreTrainedTokenizerFast, Qwen3Config, Qwen3ForCausalLM

    tok = _train_tokenizer(corpus, spec.vocab_size)
    hf_tok = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        eos_token=EOS_TOKEN,
        pad_token=PAD_TOKEN,
        additional_special_tokens=["<|im_start|>"],
        model_max_length=spec.max_position_embeddings,
        clean_up_tokenization_spaces=False,
        padding_side="left",
    )
    hf_tok.chat_template = template
    hf_tok.save_pretrained(out)

    eos_id, pad_id = tok.token_to_id(EOS_TOKEN), tok.token_to_id(PAD_TOKEN)
    config = Qwen3Config(
        vocab_size=tok.get_vocab_size(),
        hidden_size=spec.hidden_size,
        intermediate_size=spec.intermediate_size,
        num_hidden_layers=spec.num_hidden_layers,
        num_attention_heads=spec.num_attention_heads,
        num_key_value_heads=spec.num_key_value_heads,
        head_dim=spec.head_dim,
        max_position_embeddings=spec.max_position_embeddings,
        tie_word_embeddings=True,
        bos_token_id=None,
        eos_token_id=eos_id,
        pad_token_id=pad_id,
    )
    torch.manual_seed(spec.init_seed)
    model = Qwen3ForCausalLM(config)
    model.generation_config = GenerationConfig(eos_token_id=eos_id, pad_token_id=pad_id, do_sample=True)
    model.save_pretrained(out)


def _train_tokenizer(corpus: Sequence[str], vocab_size: int) -> Any:
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(PRETOKENIZE_PATTERN), behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=[*SPECIAL_TOKENS, *MARKUP_TOKENS],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(corpus, trainer=trainer)
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in SPECIAL_TOKENS])
    tok.add_tokens([AddedToken(t, special=False, normalized=False) for t in MARKUP_TOKENS])
    return tok


def _train(
    base: Path,
    out: Path,
    examples: list[dict[str, Any]],
    s: BootstrapSettings,
    env_id: str,
    *,
    progress: bool,
    threads: int | None = None,
) -> None:
    import torch

    previous = torch.get_num_threads()
    torch.set_num_threads(threads or idle_cores())  # per calling thread in torch; restored below
    try:
        _sft(base, out, examples, s, env_id, progress=progress)
    finally:
        torch.set_num_threads(previous)


def _sft(
    base: Path, out: Path, examples: list[dict[str, Any]], s: BootstrapSettings, env_id: str, *, progress: bool
) -> None:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from claw_train.models.tiny_sft import batches, encode_example, lr_factor, sft_loss, shared_prefix
    from claw_train.runlog.progress import optional_progress

    tokenizer = AutoTokenizer.from_pretrained(base)
    model = AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32)
    rows = [encode_example(tokenizer, ex, s.max_length) for ex in examples]
    rows = [r for r in rows if r is not None]
    if not rows:
        raise ValueError(f"no {env_id} demonstration fits in {s.max_length} tokens")
    torch.manual_seed(s.seed)
    rng = random.Random(s.seed)
    model.train()
    decay = [p for n, p in model.named_parameters() if p.ndim >= 2]
    rest = [p for n, p in model.named_parameters() if p.ndim < 2]
    opt = torch.optim.AdamW(
        [{"params": decay, "weight_decay": s.weight_decay}, {"params": rest, "weight_decay": 0.0}],
        lr=s.lr,
        betas=(0.9, 0.98),
    )
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda i: lr_factor(i, s.warmup, s.steps))
    pad_id = tokenizer.pad_token_id
    started = time.monotonic()
    losses: list[float] = []
    shared = shared_prefix(rows)
    with optional_progress(progress, f"bootstrapping tiny on {env_id}", s.steps) as advance:
        for step, batch in zip(range(s.steps), batches(rows, s.batch_size, rng), strict=False):
            loss = sft_loss(model, batch, pad_id, shared, lead_tokens=s.lead_tokens, lead_weight=s.lead_weight)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            sched.step()
            losses.append(loss.item())
            advance(f"loss {sum(losses[-20:]) / len(losses[-20:]):.3f}  step {step + 1}")
    model.eval()
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    report = {
        "env_id": env_id,
        "settings": asdict(s),
        "examples": len(rows),
        "seconds": round(time.monotonic() - started, 1),
        "threads": torch.get_num_threads(),
        "final_loss": round(sum(losses[-20:]) / max(1, len(losses[-20:])), 4),
    }
    (out / "bootstrap.json").write_text(json.dumps(report, indent=2))


# -- cache -----------------------------------------------------------------------------------


MARKER = "claw_tiny.json"


def _cache_root(cache_dir: str | os.PathLike[str] | None) -> Path:
    root = Path(cache_dir or os.environ.get("CLAW_TINY_CACHE") or DEFAULT_CACHE_ROOT).expanduser()
    root.mkdir(parents=True, exist_ok=True)
    return root


def _digest(obj: Any) -> str:
    data = obj.encode() if isinstance(obj, str) else json.dumps(obj, sort_keys=True, default=str).encode()
    return hashlib.sha256(data).hexdigest()[:16]


def _source() -> str:
    """The code that decides what a cached model holds (this module and the bootstrap's steps)."""
    here = Path(__file__).parent
    return _digest([(here / name).read_text(encoding="utf-8") for name in ("tiny.py", "tiny_sft.py")])


def _maker_files(env_id: str) -> list[Path]:
    """The files whose change may change ``env_id``'s demonstrations as this module uses them, this module's own
    included."""
    return [*demonstration_makers(env_id), Path(__file__)]


def _corpus_fingerprint() -> str:
    """What makes the tokenizer corpus: the generated text's module and the corpus families' makers."""
    import claw_envs

    ids = [s.env_id for s in claw_envs.registry.specs() if s.training.tokenizer_corpus]
    files = [Path(__file__).with_name("tiny_text.py"), *(f for env_id in ids for f in _maker_files(env_id))]
    return fingerprint(files, kind="tokenizer corpus", envs=ids)


def _resolve_family(family: str) -> str:
    import claw_envs

    try:
        return claw_envs.resolve_id(family)
    except KeyError as err:
        raise ValueError(f"unknown family {family!r}; registered envs: {', '.join(claw_envs.env_ids())}") from err
