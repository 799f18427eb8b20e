"""HTML -> WebShop's text observation: text chunks joined by " [SEP] ", clickables as "[label]".

Only elements that carry `data-label` are clickable (links, or submit buttons of a form), so text on the
page that looks like "[Buy Now]" or a tag stays text: jinja escapes it and this parser never promotes it.
A form holding an `<input name="q">` is the search bar (`search[query]`).
The parser is a small regex tokenizer: several times faster than `html.parser`, which matters at 1k steps/s.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from html import unescape

BLOCK = frozenset({"div", "p", "li", "ul", "h1", "h2", "h3", "h4", "nav", "form", "tr", "td", "section", "body",
                   "title", "br"})
SKIP = ("head", "script", "style", "template")
_TOKEN = re.compile(r"<!--.*?-->|<![^>]*>|<(/?)([a-zA-Z][a-zA-Z0-9-]*)([^>]*)>|([^<]+)|<", re.S)
_ATTR = re.compile(r"""([a-zA-Z_:][-a-zA-Z0-9_:.]*)(?:\s*=\s*(?:"([^"]*)"|'([^']*)'|([^\s"'>]+)))?""")
_SKIP_END = {tag: re.compile(rf"</{tag}\s*>", re.I) for tag in SKIP}


@dataclass(frozen=True)
class Clickable:
    label: str
    method: str                 # GET (a link) or POST (a form's button)
    url: str
    fields: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class TextView:
    text: str
    clickables: dict[str, Clickable]       # lower-cased label -> what clicking does (first wins)
    search_url: str | None                 # the search form's action, where the page has a search bar

    def admissible_actions(self) -> list[str]:
        actions = ["search[<query>]"] if self.search_url else []
        return actions + [f"click[{c.label}]" for c in self.clickables.values()]


@dataclass
class _Form:
    action: str
    method: str
    fields: list[tuple[str, str]] = field(default_factory=list)
    search: bool = False


def _attrs(text: str) -> dict[str, str]:
    return {m.group(1).lower(): unescape(m.group(2) or m.group(3) or m.group(4) or "")
            for m in _ATTR.finditer(text)}


class _Parser:
    def __init__(self) -> None:
        self.chunks: list[str] = []
        self.buffer: list[str] = []
        self.clickables: dict[str, Clickable] = {}
        self.in_label: str | None = None     # the tag whose text is replaced by its label
        self.form: _Form | None = None
        self.search_url: str | None = None
        self.pending_buttons: list[str] = []

    def flush(self) -> None:
        if self.buffer:
            text = " ".join(unescape("".join(self.buffer)).split())
            if text:
                self.chunks.append(text)
            self.buffer = []

    def feed(self, html: str) -> None:
        pos, n = 0, len(html)
        while pos < n:
            m = _TOKEN.match(html, pos)
            pos = m.end()
            text, tag = m.group(4), m.group(2)
            if text is not None:
                if self.in_label is None:
                    self.buffer.append(text)
            elif tag is not None:
                tag = tag.lower()
                if m.group(1):
                    self.end(tag)
                elif tag in _SKIP_END:
                    end = _SKIP_END[tag].search(html, pos)
                    pos = end.end() if end else n
                else:
                    self.start(tag, m.group(3))
            elif m.group(0) == "<" and self.in_label is None:
                self.buffer.append("&lt;")

    def start(self, tag: str, raw_attrs: str) -> None:
        if tag in BLOCK:
            self.flush()
        if tag == "form":
            a = _attrs(raw_attrs)
            self.form = _Form(a.get("action") or "", (a.get("method") or "get").upper())
        elif tag == "input" and self.form is not None:
            a = _attrs(raw_attrs)
            name = a.get("name") or ""
            if a.get("type") == "hidden":
                self.form.fields.append((name, a.get("value") or ""))
            elif name == "q":
                self.form.search = True
        if tag in ("a", "button") and "data-label" in raw_attrs and self.in_label is None:
            a = _attrs(raw_attrs)
            label = " ".join(a.get("data-label", "").split())
            self.flush()
            self.chunks.append(f"[{label}]")
            self.in_label = tag
            if tag == "a":
                self.clickables.setdefault(label.lower(), Clickable(label, "GET", a.get("href") or ""))
            elif self.form is not None:
                self.pending_buttons.append(label)

    def end(self, tag: str) -> None:
        if tag == self.in_label:
            self.in_label = None
            self.buffer = []
            return
        if tag == "form" and self.form is not None:
            form = self.form
            if form.search:
                self.search_url = form.action
            for label in self.pending_buttons:   # hidden fields may follow the button: resolve at </form>
                self.clickables.setdefault(label.lower(), Clickable(label, form.method, form.action,
                                                                    tuple(form.fields)))
            self.pending_buttons, self.form = [], None
        if tag in BLOCK:
            self.flush()


def text_view(html: str) -> TextView:
    parser = _Parser()
    parser.feed(html)
    parser.flush()
    chunks = [c for c in parser.chunks if c != "Search" or parser.search_url is None]
    return TextView(" [SEP] ".join(chunks), parser.clickables, parser.search_url)
