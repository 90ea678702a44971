"""Named datasets from the Hugging Face hub, failing in a second or two when the hub is out of reach.

``datasets.load_dataset`` on a machine without the hub retries for half a minute and then says only that it could
not reach the dataset. Here the hub is looked at first: offline is evident when ``HF_HUB_OFFLINE`` or
``HF_DATASETS_OFFLINE`` is set, or when the hub's host (``HF_ENDPOINT``, or the HTTPS proxy when one is set) does
not accept a connection within :data:`PROBE_SECONDS`. Then, unless a copy of the dataset is cached on this machine
(``datasets`` reads it offline), nothing is asked of the hub: :class:`HubUnreachable` says why and names the local
file that works in its place, in the words of the family that asked (``local_form``).
"""

from __future__ import annotations

import os
import socket
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

PROBE_SECONDS = 1.5
DEFAULT_ENDPOINT = "https://huggingface.co"
_TRUE = ("1", "true", "yes", "on")
_CONNECTION_ERRORS = frozenset({"ConnectionError", "LocalEntryNotFoundError", "OfflineModeIsEnabled", "Timeout"})


class HubUnreachable(ConnectionError):
    """A named dataset the hub cannot give here; the message names the local file that works instead."""


def offline_reason() -> str | None:
    """Why the hub is evidently out of reach (an offline variable, or its host not answering), or ``None``."""
    for name in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE"):
        if os.environ.get(name, "").strip().lower() in _TRUE:
            return f"{name} is set"
    proxy = os.environ.get("HTTPS_PROXY") or os.environ.get("https_proxy")
    url = urlparse(proxy or os.environ.get("HF_ENDPOINT") or DEFAULT_ENDPOINT)
    host, port = url.hostname or "huggingface.co", url.port or (443 if url.scheme == "https" else 80)
    try:
        socket.create_connection((host, port), timeout=PROBE_SECONDS).close()
    except OSError as err:
        return f"{host}:{port} did not answer within {PROBE_SECONDS:g} s ({err.strerror or type(err).__name__})"
    return None


def cached_here(dataset_id: str) -> bool:
    """Whether ``datasets`` or the hub client holds a copy of ``dataset_id`` on this machine."""
    home = Path(os.environ.get("HF_HOME") or Path.home() / ".cache" / "huggingface")
    datasets_cache = Path(os.environ.get("HF_DATASETS_CACHE") or home / "datasets")
    hub_cache = Path(os.environ.get("HF_HUB_CACHE") or os.environ.get("HUGGINGFACE_HUB_CACHE") or home / "hub")
    owner, _, name = dataset_id.partition("/")
    places = [datasets_cache / f"{owner}___{name}", datasets_cache / f"{owner}___{name}".lower()]
    places.append(hub_cache / f"datasets--{owner}--{name}")
    return any(place.is_dir() for place in places)


def unreachable(dataset_id: str, why: str, local_form: str) -> HubUnreachable:
    """The error for ``dataset_id`` out of reach (``why``), naming ``local_form``."""
    return HubUnreachable(
        f"Couldn't reach {dataset_id!r} on the Hugging Face hub ({why}) and no copy is cached here. {local_form}"
    )


def load_hub_dataset(dataset_id: str, config: str | None, split: str, *, local_form: str) -> Any:
    """``datasets.load_dataset(dataset_id, config, split=split)``, or :class:`HubUnreachable` at once when the hub is
    evidently out of reach and no copy is cached (see the module docstring)."""
    why = offline_reason()
    if why is not None and not cached_here(dataset_id):
        raise unreachable(dataset_id, why, local_form)
    try:
        import datasets
    except ImportError as err:  # pragma: no cover - depends on the install
        raise RuntimeError(f"loading {dataset_id!r} from the Hugging Face hub needs `pip install datasets`") from err
    try:
        return datasets.load_dataset(dataset_id, config, split=split)
    except Exception as err:  # datasets and requests each have a ConnectionError; the hub client its own errors
        if type(err).__name__ not in _CONNECTION_ERRORS:
            raise
        raise unreachable(dataset_id, str(err) or type(err).__name__, local_form) from err
