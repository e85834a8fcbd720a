"""A page of sections rendered as markdown (+ its PNGs) and as one self-contained HTML file (report, tune)."""

from __future__ import annotations

import base64
import html
import io
import re
from dataclasses import dataclass, field
from pathlib import Path

from qgate.plots import svg_text


@dataclass
class Section:
    """A report section: a title, paragraphs, tables (header + rows), figures and a code block."""

    title: str
    paragraphs: list[str] = field(default_factory=list)
    tables: list[tuple[list[str], list[list[str]]]] = field(default_factory=list)
    figures: list[tuple[str, str, bytes]] = field(default_factory=list)  # (caption, svg text, png bytes)
    code: str = ""
    code_collapsed: bool = False  # long blocks (the whole params.yaml) fold away in markdown
    callouts: list[tuple[str, str]] = field(default_factory=list)  # (fail | warn, text): boxed, after the paragraphs
    summary: str = ""  # when set, the section folds under this one line (diagnostics of a passing model)


def figure(fig, caption: str) -> tuple[str, str, bytes]:
    """A matplotlib figure as a Section's (caption, SVG text, PNG bytes); closes the figure."""
    png = io.BytesIO()
    fig.savefig(png, format="png", dpi=110, bbox_inches="tight")
    text = svg_text(fig)
    return caption, text[text.index("<svg"):], png.getvalue()


def render_markdown(verdict: str, sections: list[Section], files_dir: Path,
                    title: str = "qgate report") -> tuple[str, dict[str, bytes]]:
    """Markdown text plus the PNG files it links to (relative to the report, under `files_dir`)."""
    lines, files = [f"# {title}: {verdict}", ""], {}
    for section in sections:
        lines += [f"## {section.title}", ""]
        if section.summary:
            lines += ["<details>", f"<summary>{html.escape(section.summary)}</summary>", ""]
        for paragraph in section.paragraphs:
            lines += _markdown_paragraph(_unlinked(paragraph))
        for tone, message in section.callouts:
            lines += _markdown_paragraph(f"**{'FAIL' if tone == 'fail' else 'Undecided'}**: {message}", quote=True)
        for header, rows in section.tables:
            lines += ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
            lines += ["| " + " | ".join(_unlinked(str(c)).replace("|", "\\|") for c in row) + " |" for row in rows]
            lines.append("")
        for caption, svg, png in section.figures:
            name = f"{_slug(caption)}.{'png' if svg else 'jpg'}"  # plots are PNG, drawn images JPEG
            files[name] = png
            lines += [f"![{caption}]({files_dir.name}/{name})", ""]
        if section.code:
            block = ["```yaml", section.code.rstrip(), "```", ""]
            lines += (["<details><summary>params.yaml</summary>", "", *block, "</details>", ""]
                      if section.code_collapsed else block)
        if section.summary:
            lines += ["</details>", ""]
    return "\n".join(lines), files


def _markdown_paragraph(paragraph: str, quote: bool = False) -> list[str]:
    """A paragraph, and the yaml block a gate message carries after its first line (the scope to paste)."""
    text, _, block = paragraph.partition("\n")
    lines = [f"> {text}" if quote else text, ""]
    return lines + (["```yaml", block.rstrip(), "```", ""] if block else [])


def _slug(text: str) -> str:
    return "".join(c if c.isalnum() else "_" for c in text.lower()).strip("_")[:40]


def anchor(caption: str) -> str:
    """The HTML id of the figure captioned `caption`, whole (a link target must not collide as a file name may)."""
    return "fig-" + "".join(c if c.isalnum() else "-" for c in caption.lower())


LINK = re.compile(r"\[([^\]]+)\]\(#([\w-]+)\)")  # [text](#anchor): a link to a figure of the same page
# [text](http://127.0.0.1:port/...): the graph `make view` serves (its query is percent-encoded: no ')' or quote)
LOCAL_LINK = re.compile(r"\[([^\]]+)\]\((http://127\.0\.0\.1:\d+/[^)\s'\"<>]*)\)")


def _unlinked(text: str) -> str:
    """Markdown keeps a link's text only: the figures it names are files there, with no anchors to jump to."""
    return LINK.sub(r"\1", text)


CSS = """body{font:15px/1.5 system-ui,-apple-system,"Segoe UI",sans-serif;max-width:1100px;margin:2em auto;
padding:0 1em;color:#222}h1{font-size:1.6em;padding:.5em .8em;border-radius:6px}
h1.pass{background:#e6f4ea;color:#137333}h1.fail{background:#fce8e6;color:#a50e0e}
h1.warn{background:#fef7e0;color:#8a5a00}
h2{border-bottom:1px solid #ddd;padding-bottom:.2em;margin-top:1.6em}
table{border-collapse:collapse;margin:.6em 0;font-size:.9em}th,td{border:1px solid #ddd;padding:.3em .6em;
text-align:left;vertical-align:top}th{background:#f4f4f4}td.fail{color:#a50e0e;font-weight:600}td.pass{color:#137333}
td.warn{color:#8a5a00;font-weight:600}
code{background:#f4f4f4;padding:0 .25em;border-radius:3px;font-size:.9em}pre{background:#f7f7f7;padding:1em;
overflow:auto;font-size:.85em}figure{margin:1em 0}figcaption{color:#555;font-size:.9em}svg{max-width:100%;height:auto}
p.fail{background:#fff4f2;border-left:4px solid #d93025;padding:.4em .8em}
p.warn{background:#fffaf0;border-left:4px solid #e3a008;padding:.4em .8em}img{max-width:100%}
details>summary{cursor:pointer;color:#444;padding:.3em 0}"""


def render_html(verdict: str, sections: list[Section], title: str = "qgate report") -> str:
    """A self-contained HTML page: CSS inline, plots as inline SVG, images as data URIs, nothing fetched."""
    state = "fail" if verdict.startswith("FAIL") else "warn" if "inconclusive" in verdict else "pass"
    parts = [f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>",
             f"<style>{CSS}</style></head><body>",
             f"<h1 class='{state}'>{html.escape(title)}: {html.escape(verdict)}</h1>"]
    for section in sections:
        parts.append(f"<h2>{html.escape(section.title)}</h2>")
        if section.summary:
            parts.append(f"<details><summary>{_inline(section.summary)}</summary>")
        parts += [_html_paragraph(paragraph) for paragraph in section.paragraphs]
        parts += [_html_paragraph(message, tone) for tone, message in section.callouts]
        for header, rows in section.tables:
            parts.append("<table><tr>" + "".join(f"<th>{html.escape(h)}</th>" for h in header) + "</tr>")
            for row in rows:
                parts.append("<tr>" + "".join(_cell(str(c)) for c in row) + "</tr>")
            parts.append("</table>")
        for caption, svg, png in section.figures:
            body = svg if svg else f"<img alt='{html.escape(caption)}' src='data:image/jpeg;base64," \
                                   f"{base64.b64encode(png).decode()}'>"
            parts.append(f"<figure id='{anchor(caption)}'>{body}<figcaption>{html.escape(caption)}</figcaption>"
                         "</figure>")
        if section.code:
            parts.append(f"<pre>{html.escape(section.code)}</pre>")
        if section.summary:
            parts.append("</details>")
    parts.append("</body></html>")
    return "\n".join(parts)


def _html_paragraph(paragraph: str, tone: str = "") -> str:
    text, _, block = paragraph.partition("\n")
    return f"<p class='{tone}'>{_inline(text)}</p>" + (f"<pre>{html.escape(block)}</pre>" if block else "")


def _cell(text: str) -> str:
    """A table cell; a result cell is coloured by its verdict (an inconclusive pass amber, any fail red)."""
    plain = text.replace("**", "")
    state = ("fail" if text.startswith("**") and plain.endswith(("FAIL", "FAIL)")) else "warn"
             if plain == "inconclusive (pass)" else "pass" if plain == "pass" else "")
    return f"<td class='{state}'>{_inline(plain if state else text)}</td>"


def _inline(text: str) -> str:
    """Markdown `code` and **bold** to HTML, everything else escaped."""
    out, bold = [], False
    for i, chunk in enumerate(html.escape(text).split("`")):
        if i % 2:
            out.append(f"<code>{chunk}</code>")
            continue
        pieces = chunk.split("**")
        for j, piece in enumerate(pieces):
            if j:
                bold = not bold
                out.append("<b>" if bold else "</b>")
            out.append(piece)
    if bold:
        out.append("</b>")
    return LOCAL_LINK.sub(r"<a href='\2'>\1</a>", LINK.sub(r"<a href='#\2'>\1</a>", "".join(out)))
