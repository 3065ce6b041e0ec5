"""MkDocs hook: the Benchmarks page's current figures, taken from ``benchmarks/RESULTS.md``.

``on_page_markdown`` replaces the line ``<!-- generated: latest results -->`` with a "Latest
results" heading and everything between RESULTS.md's ``## Latest`` and ``## History`` headings
(``latest_section``), so the page shows what RESULTS.md says and cannot drift from it. A relative
link in that text (it would point outside the docs) becomes its text and the path as code. A page
with the marker whose RESULTS.md lacks either heading fails the build (``MissingSection``).
Source: MkDocs "Hooks" (event ``on_page_markdown``), issue 22.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

MARKER = "<!-- generated: latest results -->"
RESULTS = Path(__file__).resolve().parent.parent.parent / "benchmarks" / "RESULTS.md"
HEADING = "## Latest results"
_LINK = re.compile(r"(?<!!)\[([^\]]+)\]\((?!https?://|#|mailto:)([^)\s]+)\)")


class MissingSection(ValueError):
    """RESULTS.md has no ``## Latest`` heading, or no ``## History`` after it."""


def latest_section(results_md: str) -> str:
    """The text between the lines ``## Latest`` and ``## History`` of ``results_md`` (stripped),
    relative links ``[t](p)`` rewritten to ``t (`benchmarks/p`)``. Raises ``MissingSection``."""
    lines = results_md.splitlines()
    try:
        start = lines.index("## Latest")
        end = lines.index("## History", start)
    except ValueError:
        raise MissingSection("benchmarks/RESULTS.md needs a '## Latest' line followed by a "
                             "'## History' line (the Benchmarks page shows what is between)"
                             ) from None
    text = "\n".join(lines[start + 1:end]).strip()
    return _LINK.sub(lambda m: f"{m.group(1)} (`benchmarks/{m.group(2)}`)", text)


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    """MkDocs event: put the latest results where the marker line is (other pages unchanged)."""
    if MARKER not in markdown:
        return markdown
    from mkdocs.exceptions import PluginError
    try:
        section = latest_section(RESULTS.read_text(encoding="utf-8"))
    except (OSError, MissingSection) as exc:
        raise PluginError(f"{page.file.src_path}: {exc}") from exc
    return markdown.replace(MARKER, f"{HEADING}\n\n{section}\n")
