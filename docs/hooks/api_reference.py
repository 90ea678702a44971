"""MkDocs hook: one API reference page per public module, generated from the package tree at build time.

Nothing is hand-listed, so a module added to ``claw_envs``, ``claw_train`` or ``judges`` appears in the
reference (and in the navigation) on the next build; a module, package or name with a leading underscore
is private and left out. Each page is a single mkdocstrings directive (``::: module``), so the text comes
from the docstrings and cannot drift from the code.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the tests import this module's helpers without mkdocs
    from mkdocs.config.defaults import MkDocsConfig
    from mkdocs.structure.files import Files
    from mkdocs.structure.pages import Page

PACKAGES = ("claw_envs", "claw_train", "judges")
REFERENCE = "reference"
# a Sphinx role as Markdown renders it: :class:`~claw_envs.spec.FamilySpec` -> :class:<code>~claw_envs…</code>
ROLE = re.compile(r":(?:py:)?(?:func|meth|class|mod|attr|data|exc|obj|const):<code>(~?)(\.?[\w.]+?)(\(\))?</code>")


def public_modules(root: Path, packages: tuple[str, ...] = PACKAGES) -> list[str]:
    """Dotted names of the public modules under ``root`` (packages first, then their modules, sorted)."""
    names = []
    for package in packages:
        for path in sorted((root / package).rglob("*.py")):
            parts = path.relative_to(root).with_suffix("").parts
            if parts[-1] == "__init__":
                parts = parts[:-1]
            if any(part.startswith("_") for part in parts):
                continue
            if all((root / Path(*parts[:i]) / "__init__.py").is_file() for i in range(1, len(parts))):
                names.append(".".join(parts))
    return sorted(names, key=lambda name: name.split("."))


def page_path(module: str) -> str:
    """The reference page of ``module``, relative to the docs folder."""
    return f"{REFERENCE}/{module.replace('.', '/')}.md"


def page_text(module: str) -> str:
    """The Markdown of ``module``'s reference page: a title and one mkdocstrings directive."""
    return f"# `{module}`\n\n::: {module}\n    options:\n      show_root_heading: false\n"


def index_text(modules: list[str]) -> str:
    """The reference's front page: every public module, linked, grouped by package."""
    lines = [
        "# API reference",
        "",
        "Generated from the docstrings at build time: one page per public module of "
        + ", ".join(f"`{p}`" for p in PACKAGES)
        + ". A leading underscore marks a private module or name.",
    ]
    for package in PACKAGES:
        lines += ["", f"## The `{package}` package", ""]
        members = [m for m in modules if m.split(".")[0] == package]
        lines += [f"* [`{m}`]({page_path(m).removeprefix(REFERENCE + '/')})" for m in members]
    return "\n".join(lines) + "\n"


def _root(config: MkDocsConfig) -> Path:
    return Path(config.config_file_path).resolve().parent


def on_config(config: MkDocsConfig) -> MkDocsConfig:
    """Append the "API reference" section, one entry per public module, to the navigation."""
    modules = public_modules(_root(config))
    section: list = [f"{REFERENCE}/index.md"]
    for package in PACKAGES:
        section.append({package: [{m: page_path(m)} for m in modules if m.split(".")[0] == package]})
    config.nav = [*(config.nav or []), {"API reference": section}]
    return config


def on_files(files: Files, config: MkDocsConfig) -> Files:
    """Add the generated reference pages to the site's files."""
    from mkdocs.structure.files import File

    modules = public_modules(_root(config))
    files.append(File.generated(config, f"{REFERENCE}/index.md", content=index_text(modules)))
    for module in modules:
        files.append(File.generated(config, page_path(module), content=page_text(module)))
    return files


def role_target(text: str, module: str, is_package: bool) -> str:
    """The dotted name a role's ``text`` means on ``module``'s page: relative names (``.workspace``,
    ``RunDir.prepare``) are read from the module, names that start with a package of ours stay as written."""
    if text.startswith("."):
        base = module if is_package else module.rpartition(".")[0]
        return f"{base}{text}"
    if text.split(".")[0] in PACKAGES:
        return text
    return f"{module}.{text}"


def roles_to_links(html: str, module: str, is_package: bool) -> str:
    """Sphinx roles left in docstrings become optional cross-references: a link where the name resolves, plain
    code where it does not (a name outside the reference), never a broken link."""

    def link(match: re.Match[str]) -> str:
        short, text, call = match.groups()
        title = text.rsplit(".", 1)[-1] if short else text.lstrip(".")
        target = role_target(text, module, is_package)
        return f'<autoref identifier="{target}" optional><code>{title}{call or ""}</code></autoref>'

    return ROLE.sub(link, html)


def on_page_content(html: str, page: Page, config: MkDocsConfig, files: Files) -> str:
    """On reference pages, turn the Sphinx roles of the docstrings into cross-references."""
    uri = page.file.src_uri
    if not uri.startswith(f"{REFERENCE}/") or uri == f"{REFERENCE}/index.md":
        return html
    module = uri.removeprefix(f"{REFERENCE}/").removesuffix(".md").replace("/", ".")
    is_package = (_root(config) / Path(*module.split(".")) / "__init__.py").is_file()
    return roles_to_links(html, module, is_package)
