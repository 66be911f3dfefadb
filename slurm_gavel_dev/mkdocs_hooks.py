"""mkdocs hooks of the docs site (mkdocs.yml `hooks:`).

A `|` inside a table cell must be written `\\|` on the forge (GitHub would split the cell
there, inline code or not), and Python-Markdown keeps that backslash inside inline code:
the site would show `a\\|b` for the constraint `a|b`. The pages stay written for the
forge; the built HTML drops the backslash in a table cell's inline code only (a code
block may mean `\\|`, as a grep pattern does)."""

from __future__ import annotations

import re

CELL = re.compile(r"(<t[dh]\b[^>]*>)(.*?)(</t[dh]>)", re.DOTALL)
CODE = re.compile(r"<code>(.*?)</code>", re.DOTALL)


def unescape_table_pipes(html: str) -> str:
    """`\\|` -> `|` inside the <code> of table cells; everything else is left as it is."""

    def code(m: re.Match[str]) -> str:
        return "<code>" + m.group(1).replace("\\|", "|") + "</code>"

    def cell(m: re.Match[str]) -> str:
        return m.group(1) + CODE.sub(code, m.group(2)) + m.group(3)

    return CELL.sub(cell, html)


def on_page_content(html: str, **_: object) -> str:
    return unescape_table_pipes(html)
