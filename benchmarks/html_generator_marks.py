"""The main content a documentation generator marks on its own pages: the benchmark's truth.

Read with the standard library's HTMLParser, so neither extractor's parser defines it; script and
style text left out, block elements separated. The generator comes from `<meta name="generator">`;
which element is main, per generator, is documented in benchmarks/boilerplate_extraction.py.
"""

from __future__ import annotations

from html.parser import HTMLParser

_BLOCK_TAGS = frozenset(
    "address article aside blockquote br caption dd details div dl dt figcaption figure footer form h1 h2 "
    "h3 h4 h5 h6 header hr li main nav ol p pre section summary table tbody td tfoot th thead tr ul".split()
)
_SKIP_TEXT_TAGS = frozenset({"script", "style", "noscript", "template"})
_VOID_TAGS = frozenset("area base br col embed hr img input link meta param source track wbr".split())

# What each generator calls itself in <meta name="generator">, as a prefix of the lower-cased content.
_GENERATOR_PREFIXES = (
    ("docutils", "sphinx"),  # Sphinx writes through docutils: "Docutils 0.19: https://docutils..."
    ("sphinx", "sphinx"),
    ("docbook xsl", "docbook-xsl"),  # "DocBook XSL Stylesheets V1.79.2" (also "Vsnapshot")
    ("publican", "publican"),
    ("makeinfo", "makeinfo"),  # texinfo <= 6: "makeinfo"; 7: "texi2any"
    ("texi2any", "makeinfo"),
)
# DocBook XSL writes each component as <div class="ELEMENT-NAME"> (html/component.xsl, sections.xsl,
# division.xsl, refentry.xsl); chunked pages put div.navheader / div.navfooter (or a customisation's
# navigation tables, e.g. valgrind's) around it as its siblings.
_DOCBOOK_COMPONENTS = frozenset(
    "set book part chapter appendix preface article reference refentry section sect1 sect2 sect3 sect4 "
    "sect5 simplesect glossary bibliography index setindex colophon dedication acknowledgements "
    "legalnotice qandaset topic".split()
)
# makeinfo (texinfo 6) writes a node as <div class="chapter|section|..." id="NODE">, texinfo 7 as
# <div class="chapter-level-extent" ...>; inside it, the node's navigation line: div.header (6),
# div.nav-panel (7).
_TEXINFO_NODES = frozenset(
    "top chapter section subsection subsubsection appendix appendixsec appendixsubsec appendixsubsubsec "
    "unnumbered unnumberedsec unnumberedsubsec unnumberedsubsubsec chapheading heading".split()
)
_TEXINFO_NAVIGATION = frozenset({"header", "nav-panel"})


def _generator(content: str) -> str | None:
    c = content.strip().lower()
    return next((name for prefix, name in _GENERATOR_PREFIXES if c.startswith(prefix)), None)


class _MainText(HTMLParser):
    """The text of the generator-marked main element (and, for the baseline, of the whole body).

    `found` names the generator whose mark was found: "sphinx" and "node-api" (`role="main"`),
    "publican", "docbook-xsl", "makeinfo"; None when the page has no mark we know."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.main: list[str] = []
        self.body: list[str] = []
        self.found: str | None = None
        self.generator: str | None = None  # from <meta name="generator">
        self._stack: list[str] = []  # open elements (void ones never pushed)
        self._main_depth: int | None = None  # stack depth of the main element while inside it
        self._body_depth: int | None = None
        self._nav_depth: int | None = None  # stack depth of a navigation element inside the main one
        self._skip = 0

    def _main_mark(self, tag: str, a: dict[str, str | None]) -> str | None:
        classes = set((a.get("class") or "").split())
        if a.get("role") == "main":
            if self.generator == "sphinx":
                return "sphinx"
            return "node-api" if a.get("id") == "apicontent" else "role=main"
        if tag != "div":
            return None
        if self.generator == "publican":
            child_of_body = self._body_depth is not None and len(self._stack) == self._body_depth + 1
            return "publican" if child_of_body and a.get("id") != "banner" else None
        if self.generator == "docbook-xsl" and classes & _DOCBOOK_COMPONENTS:
            return "docbook-xsl"
        if self.generator == "makeinfo" and (
            classes & _TEXINFO_NODES or any(c.endswith("-level-extent") for c in classes)
        ):
            return "makeinfo"
        return None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in _VOID_TAGS:
            if tag == "br":
                self._sep()
            elif tag == "meta":
                a = dict(attrs)
                if (a.get("name") or "").lower() == "generator" and self.generator is None:
                    self.generator = _generator(a.get("content") or "")
            return
        a = dict(attrs)
        if tag == "body":
            self._body_depth = len(self._stack)
        if self._main_depth is None and self.found in (None, "makeinfo"):
            mark = self._main_mark(tag, a)
            if mark is not None:
                self.found, self._main_depth = mark, len(self._stack)
        elif (self._in_main() and self._nav_depth is None and self.found == "makeinfo"
              and set((a.get("class") or "").split()) & _TEXINFO_NAVIGATION):
            self._nav_depth = len(self._stack)
        self._stack.append(tag)
        if tag in _SKIP_TEXT_TAGS:
            self._skip += 1
        if tag in _BLOCK_TAGS:
            self._sep()

    def handle_endtag(self, tag: str) -> None:
        if tag in _VOID_TAGS or tag not in self._stack:
            return
        while self._stack:  # close anything left open inside it (HTML's implied end tags)
            top = self._stack.pop()
            if top in _SKIP_TEXT_TAGS:
                self._skip -= 1
            if self._nav_depth is not None and len(self._stack) <= self._nav_depth:
                self._nav_depth = None
            if self._main_depth is not None and len(self._stack) <= self._main_depth:
                # done: never re-enter, but for makeinfo's one-file manuals (--no-split: every node a
                # sibling div under the body)
                self._main_depth = None if self.found == "makeinfo" else -1
            if top == tag:
                break
        if tag in _BLOCK_TAGS:
            self._sep()

    def _sep(self) -> None:
        if self._in_main() and self._nav_depth is None:
            self.main.append("\n")
        if self._body_depth is not None:
            self.body.append("\n")

    def _in_main(self) -> bool:
        return self._main_depth is not None and self._main_depth >= 0

    def handle_data(self, data: str) -> None:
        if self._skip:
            return
        if self._in_main() and self._nav_depth is None:
            self.main.append(data)
        if self._body_depth is not None:
            self.body.append(data)


def marked_text(html: str) -> tuple[str | None, str, str]:
    """(generator mark or None, main text, whole body text)."""
    p = _MainText()
    p.feed(html)
    p.close()
    return p.found, "".join(p.main), "".join(p.body)
