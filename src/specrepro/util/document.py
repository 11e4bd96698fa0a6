"""A report as data: sections of text, tables and figures, rendered from the same objects to GitHub-flavoured
markdown (`to_markdown`) and to one self-contained HTML page (`to_html`, the Jinja2 template
templates/report.html.j2: no script, no external asset, a CSP that forbids every request but inline images).

Text may carry two inline marks, **bold** and `code`, which markdown keeps as they are and HTML turns into
<strong> and <code> (after escaping everything else). A block or section marked `only="html"` (figures, long
per-question listings) is left out of the markdown; `collapsed` sections fold into <details> in HTML.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Iterable, List, Optional, Sequence, Union

VERDICT_CLASSES = {"REPRODUCED": "reproduced", "NOT REPRODUCED": "not-reproduced", "INCONCLUSIVE": "inconclusive",
                   "NOT JUDGED": "not-judged", "NOT TESTABLE HERE": "not-testable"}


def verdict_class(verdict: str) -> str:
    """The CSS class a verdict is coloured by (`verdict v-<name>`); an unknown verdict reads as mixed."""
    return "verdict v-" + VERDICT_CLASSES.get(verdict, "mixed")


@dataclass
class Cell:
    """A table cell: its text, whether it is bold, a plain note after it, and the class HTML colours it by."""

    text: str
    strong: bool = False
    note: str = ""
    cls: str = ""
    # verbatim text (a model's output): a code span in markdown, <code> in HTML, no inline marks read
    code: bool = False


def verdict_cell(verdict: str, note: str = "") -> Cell:
    return Cell(verdict, strong=True, note=note, cls=verdict_class(verdict))


def yes_no(value: Optional[bool], yes: str = "yes", no: str = "no", unknown: str = "-",
           bad_is_strong: bool = True) -> Cell:
    """A check's outcome: `yes` (class good), `no` (bold, class bad), or unknown."""
    if value is None:
        return Cell(unknown)
    return Cell(yes, cls="good") if value else Cell(no, strong=bad_is_strong, cls="bad")


@dataclass(kw_only=True)
class Block:
    # "" in both renderings; "html": left out of the markdown
    only: str = ""


@dataclass
class Text(Block):
    """Lines of prose: one markdown paragraph (lines kept as they are), one HTML paragraph per line."""

    lines: List[str]
    quote: bool = False
    kind = "text"


@dataclass
class Bullets(Block):
    items: List[str]
    kind = "bullets"


@dataclass
class Figure(Block):
    """A plot: its file name (report/plots/<name>.png), the PNG as base64, and its caption."""

    name: str
    png: str
    caption: str
    kind = "figure"

    def __post_init__(self):
        self.only = "html"


@dataclass
class Table(Block):
    """A table; `title` a line above it; `figures` the plots that illustrate it (HTML puts them beside it)."""

    header: List[str]
    rows: List[List[Union[str, Cell]]]
    title: str = ""
    figures: List[Figure] = field(default_factory=list)
    kind = "table"


@dataclass
class Code(Block):
    text: str
    lang: str = ""
    kind = "code"


@dataclass
class Details(Block):
    """A folded part of a section (HTML <details>; markdown: its blocks, the summary a bold line)."""

    summary: str
    blocks: List[Block]
    kind = "details"


@dataclass
class Section:
    title: str
    blocks: List[Any] = field(default_factory=list)
    level: int = 3
    collapsed: bool = False
    # shown on a collapsed section's folded line in HTML (its verdict, counts)
    note: str = ""
    only: str = ""
    subsections: List["Section"] = field(default_factory=list)
    id: str = ""


# --- markdown ---------------------------------------------------------------------------------------------------

def md_cell(cell: Union[str, Cell]) -> str:
    if not isinstance(cell, Cell):
        text = str(cell)
    elif cell.code:
        text = code_span(cell.text)
    else:
        text = (f"**{cell.text}**" if cell.strong else cell.text) + cell.note
    # a pipe or a line break would end the cell
    return text.replace("|", "\\|").replace("\r", " ").replace("\n", " ")


def code_span(text: str) -> str:
    """Markdown code span around any text: a fence longer than any run of backticks inside it."""
    text = text.replace("\r", " ").replace("\n", " ")
    fence = "`" * (max((len(m) for m in re.findall(r"`+", text)), default=0) + 1)
    pad = " " if text.startswith("`") or text.endswith("`") or not text.strip() else ""
    return f"{fence}{pad}{text}{pad}{fence}"


def md_table(table: Table) -> str:
    lines = [table.title, ""] if table.title else []
    lines += ["| " + " | ".join(table.header) + " |", "|" + " --- |" * len(table.header)]
    lines += ["| " + " | ".join(md_cell(c) for c in row) + " |" for row in table.rows]
    return "\n".join(lines)


def md_block(block: Block) -> str:
    if block.kind == "text":
        return "\n".join(f"> {line}" if block.quote else line for line in block.lines)
    if block.kind == "bullets":
        return "\n".join(f"- {item}" for item in block.items)
    if block.kind == "table":
        return md_table(block)
    if block.kind == "code":
        return f"```{block.lang}\n{block.text}\n```"
    if block.kind == "details":
        return "\n\n".join([f"**{block.summary}**", *(md_block(b) for b in block.blocks if b.only != "html")])
    return ""


def md_section(section: Section) -> str:
    parts = [f"{'#' * section.level} {section.title}"] if section.title else []
    parts += [md_block(b) for b in section.blocks if b.only != "html"]
    parts += [md_section(s) for s in section.subsections if s.only != "html"]
    return "\n\n".join(p for p in parts if p)


def to_markdown(sections: Iterable[Section]) -> str:
    return "\n\n".join(text for s in sections if s.only != "html" and (text := md_section(s))) + "\n"


# --- HTML -------------------------------------------------------------------------------------------------------

_INLINE = re.compile(r"\*\*(.+?)\*\*|`([^`]+)`")


def inline(text: Any):
    """Escaped text with its **bold** and `code` marks as <strong> and <code>."""
    from markupsafe import Markup, escape

    out, pos = [], 0
    text = str(text)
    for m in _INLINE.finditer(text):
        out.append(escape(text[pos:m.start()]))
        if m.group(1) is not None:
            out.append(Markup("<strong>%s</strong>") % inline(m.group(1)))
        else:
            out.append(Markup("<code>%s</code>") % m.group(2))
        pos = m.end()
    out.append(escape(text[pos:]))
    return Markup("").join(out)


def slug(text: str, taken: set) -> str:
    base = re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")[:60] or "section"
    name, n = base, 2
    while name in taken:
        name, n = f"{base}-{n}", n + 1
    taken.add(name)
    return name


def assign_ids(sections: Sequence[Section], taken: Optional[set] = None) -> None:
    taken = set() if taken is None else taken
    for s in sections:
        s.id = s.id or slug(s.title, taken)
        taken.add(s.id)
        assign_ids(s.subsections, taken)


def environment():
    from jinja2 import Environment, PackageLoader, StrictUndefined, select_autoescape

    env = Environment(loader=PackageLoader("specrepro", "templates"), autoescape=select_autoescape(["j2"]),
                      undefined=StrictUndefined, trim_blocks=True, lstrip_blocks=True)
    env.filters["inline"] = inline
    env.filters["cell_text"] = lambda c: c if isinstance(c, Cell) else Cell(str(c))
    return env


def to_html(title: str, summary: Section, sections: List[Section], **context: Any) -> str:
    """The page: `summary` first (the verdicts), then a table of contents, then `sections`."""
    shown = [s for s in sections if s.only != "markdown"]
    assign_ids([summary, *shown])
    return environment().get_template("report.html.j2").render(title=title, summary=summary, sections=shown,
                                                               **context)
