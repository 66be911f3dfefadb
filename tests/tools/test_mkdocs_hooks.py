"""The docs site's hook: a table cell's `\\|` shows as `|` in inline code on the site."""

from __future__ import annotations

from slurm_gavel_dev.mkdocs_hooks import on_page_content, unescape_table_pipes


def test_an_escaped_pipe_in_a_cells_code_shows_plain() -> None:
    cells = "<td><code>a{p}b</code>, <code>[a{p}b]</code></td><th><code>x{p}y</code></th>"
    html, want = cells.format(p="\\|"), cells.format(p="|")
    assert unescape_table_pipes(html) == want
    assert on_page_content(html, page=None, config=None, files=None) == want


def test_code_blocks_and_text_outside_cells_are_left_alone() -> None:
    html = "<p>a \\| b <code>c\\|d</code></p><pre><code>grep 'x\\|y'\n</code></pre><td>e \\| f</td>"
    assert unescape_table_pipes(html) == html
