"""What a GUI backend shows the agent: the screenshot, the accessibility tree with element ids, URL and title.

Both backends describe the screen the same way: one line per element, ``[id] role "name"`` plus its state
(``value="…"``, ``checked``, ``disabled``), indented under its parent; ids are stable for as long as the
element exists. :class:`Element` keeps each element's box so that element actions and oracle scripts can
turn an id into screen coordinates.
"""

from __future__ import annotations

import functools
import hashlib
import io
from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np

MAX_TREE_LINES = 150
"""Lines of the tree shown to the agent; the rest is cut with a note."""


@dataclass(frozen=True)
class Element:
    """One element of the tree: its id, role, accessible name and box (x, y, width, height in screen pixels)."""

    id: str
    role: str
    name: str
    box: tuple[float, float, float, float]

    @property
    def center(self) -> tuple[int, int]:
        """The middle of the box, in whole pixels."""
        x, y, w, h = self.box
        return round(x + w / 2), round(y + h / 2)


@dataclass(frozen=True)
class Screen:
    """One observation of the screen."""

    png: bytes
    tree: str
    elements: Mapping[str, Element] = field(default_factory=dict)
    url: str = ""
    title: str = ""
    messages: tuple[str, ...] = ()
    """What the app posted to the user since the previous observation (a validation error, "wrong item")."""

    @functools.cached_property
    def fingerprint(self) -> str:
        """Changes when anything the agent can see changes (tree, address, title or pixels)."""
        digest = hashlib.sha256(self.png)
        digest.update(f"\0{self.tree}\0{self.url}\0{self.title}".encode())  # messages are said, not seen
        return digest.hexdigest()

    def find(self, role: str, name: str) -> Element | None:
        """The first element with this role and accessible name (exact match), if any."""
        for element in self.elements.values():
            if element.role == role and element.name == name:
                return element
        return None

    @functools.cached_property
    def array(self) -> np.ndarray:
        """The screenshot as a ``uint8`` array of shape (height, width, 3)."""
        from PIL import Image

        with Image.open(io.BytesIO(self.png)) as img:
            return np.asarray(img.convert("RGB"), dtype=np.uint8)


def tree_text(lines: list[str], limit: int = MAX_TREE_LINES) -> str:
    """The tree's lines joined, cut to ``limit`` lines with a note saying how many were left out."""
    if len(lines) <= limit:
        return "\n".join(lines)
    return "\n".join([*lines[:limit], f"… {len(lines) - limit} more elements not shown"])
