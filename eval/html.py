"""The reports' shared page and table: one `Table` renders as Markdown (metrics.md, pass_at_k.md) and
as an HTML table (report.html), so the two never disagree; `page` wraps a report in one stylesheet.

    t = Table(["protocol", "exact"], [["no TTA", "58.00"]], align="lr")
    t.markdown()   # '| protocol | exact |\\n|---|---:|\\n| no TTA | 58.00 |'
    page("report", [heading(1, "report"), t.html(), image(png, "example 3")])
"""

from __future__ import annotations

import base64
import html
from collections.abc import Sequence
from dataclasses import dataclass

STYLE = (
    "body{font-family:system-ui,sans-serif;margin:24px;max-width:1400px;color:#222}"
    "table{border-collapse:collapse;margin:8px 0 16px}"
    "th,td{border:1px solid #ccc;padding:3px 10px}th{background:#f3f3f3}"
    "td.r,th.r{text-align:right;font-variant-numeric:tabular-nums}td.l,th.l{text-align:left}"
    "caption{caption-side:top;text-align:left;padding:4px 0;color:#444}"
    "figure{margin:8px 0 20px}figcaption{color:#444;margin-bottom:4px}"
    ".fail{color:#b22}.ok{color:#282}"
)


@dataclass
class Table:
    """A header, rows of already formatted cells, and an alignment per column ('l' or 'r')."""

    header: Sequence[str]
    rows: Sequence[Sequence[str]]
    align: str = ""  # one letter per column; '' = the first column left, the others right
    caption: str = ""  # HTML only (Markdown keeps its text around the table)

    def __post_init__(self) -> None:
        if not self.align:
            self.align = "l" + "r" * (len(self.header) - 1)
        assert len(self.align) == len(self.header) and set(self.align) <= {"l", "r"}, self.align
        for row in self.rows:
            assert len(row) == len(self.header), f"a row of {len(row)} cells under {len(self.header)} columns"

    def markdown(self) -> str:
        """Pipe table: '|---|' for a left column, '|---:|' for a right one (no trailing newline)."""
        lines = ["| " + " | ".join(self.header) + " |", "|" + "".join("---|" if a == "l" else "---:|" for a in self.align)]
        lines += ["| " + " | ".join(row) + " |" for row in self.rows]
        return "\n".join(lines)

    def html(self) -> str:
        def cells(tag: str, row: Sequence[str]) -> str:
            return "".join(f"<{tag} class='{a}'>{html.escape(str(v))}</{tag}>" for a, v in zip(self.align, row))

        cap = f"<caption>{html.escape(self.caption)}</caption>" if self.caption else ""
        body = "".join(f"<tr>{cells('td', row)}</tr>" for row in self.rows)
        return f"<table>{cap}<thead><tr>{cells('th', self.header)}</tr></thead><tbody>{body}</tbody></table>"


def heading(level: int, text: str, cls: str = "") -> str:
    return f"<h{level}{f' class={cls!r}' if cls else ''}>{html.escape(text)}</h{level}>"


def paragraph(text: str) -> str:
    return f"<p>{html.escape(text)}</p>"


def image(png: bytes, alt: str, caption: str = "") -> str:
    """The PNG embedded (the page stays one self-contained file), in a figure with its caption."""
    src = f"data:image/png;base64,{base64.b64encode(png).decode()}"
    cap = f"<figcaption>{html.escape(caption)}</figcaption>" if caption else ""
    return f"<figure>{cap}<img src='{src}' alt='{html.escape(alt, quote=True)}'></figure>"


def page(title: str, body: Sequence[str]) -> str:
    """A whole document: the title, the shared stylesheet, the body's parts one per line."""
    return "\n".join([f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>",
                      f"<style>{STYLE}</style></head><body>", *body, "</body></html>"]) + "\n"
