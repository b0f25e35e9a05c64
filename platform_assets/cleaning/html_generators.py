"""Documentation generators that mark their own navigation: recognise them, drop what they mark.

Resiliparse's main-content heuristic is tuned for web pages, and on generated manuals it misreads
the markup both ways (measured on Debian's doc packages, benchmarks/boilerplate_extraction.py):

- it drops boxes classed ``sidebar`` and bulleted lists it takes for menus (a ``<ul>`` that ends
  its section, or sits between short paragraphs) as navigation: DocBook's ``<sidebar>`` is the
  Debian handbook's NOTE / IN PRACTICE box (26% of its text; recall 73%), and a manual's lists
  are main text (makeinfo: recall 96%);
- it keeps navigation whose markup it does not know: makeinfo's ``div.header`` ("Next: ...,
  Previous: ..., Up: ... [Index]"), DocBook XSL's navigation tables (PostgreSQL: 2.7% of the kept
  text is Prev / Up / Home / Next).

A page whose ``<meta name="generator">`` names a generator listed here gets no heuristic: the
elements that generator documents as navigation are dropped and everything else is kept. Each
generator's rules come from its own output templates (named per rule), not from tuning on the
benchmark's pages; pages of any other origin keep Resiliparse's heuristic unchanged.
"""

from __future__ import annotations

from dataclasses import dataclass

from resiliparse.parse.html import CSSParserException, HTMLTree


@dataclass(frozen=True)
class GeneratorRules:
    name: str
    meta_prefixes: tuple[str, ...]
    """Lower-cased prefixes of `<meta name="generator" content=...>` that identify the generator."""
    navigation: tuple[str, ...]
    """CSS selectors of the elements the generator writes as navigation (dropped with their subtree)."""


# Navigation every generator's pages may carry, whatever wrote them (ARIA and HTML5 semantics).
COMMON_NAVIGATION = ('[role="navigation"]', '[role="search"]', "body > nav", "body > header", "body > footer")

GENERATORS: tuple[GeneratorRules, ...] = (
    # Sphinx writes through docutils and says so ("Docutils 0.19: https://docutils..."). Its basic
    # theme (layout.html) puts the relations bars in div.related[role=navigation], the sidebar in
    # div.sphinxsidebar[role=navigation], the footer in div.footer; Read the Docs' theme its sidebar
    # in nav.wy-nav-side, the breadcrumbs in div[role=navigation], the footer ("Built with Sphinx
    # using a theme provided by Read the Docs") in footer.html's <footer> inside the content column;
    # the Python docs' theme adds div.mobile-nav. Admonitions (div.admonition, .note, .warning) and
    # docutils' sidebar (aside.sidebar / div.sidebar) are inside div[role=main] and stay.
    GeneratorRules(
        "sphinx",
        ("docutils", "sphinx"),
        (".related", ".sphinxsidebar", ".footer", ".mobile-nav", ".wy-nav-side", ".wy-nav-top",
         ".rst-versions", ".rst-footer-buttons", '[role="contentinfo"]', "footer", ".headerlink"),
    ),
    # DocBook XSL (html/chunk-common.xsl): div.navheader / div.navfooter around each chunk, their
    # tables summarised "Navigation header" / "Navigation footer" (customisations such as
    # valgrind's keep the summaries but drop the div classes). Admonitions (div.note, .warning,
    # .tip, .caution, .important) and div.sidebar are inside the component's div and stay.
    GeneratorRules(
        "docbook-xsl",
        ("docbook xsl",),
        (".navheader", ".navfooter", 'table[summary="Navigation header"]',
         'table[summary="Navigation footer"]', ".breadcrumbs"),
    ),
    # Publican (xsl/html.xsl, html-single.xsl): div#banner (site logo, "Download the ebook"),
    # p#title, ul.docnav (Prev / Up / Home / Next), and the language/format switchers.
    GeneratorRules(
        "publican",
        ("publican",),
        ("#banner", "p#title", "ul.docnav", ".docnav", "#tocdiv", "#navigation", ".breadcrumbs"),
    ),
    # makeinfo (texi2any: init/html.pm, texinfo 6: div.header, texinfo 7: div.nav-panel) writes the
    # node's "Next: ..., Previous: ..., Up: ... [Contents][Index]" line above (and with
    # @setfilename splits, below) the node's text.
    GeneratorRules(
        "makeinfo",
        ("makeinfo", "texi2any"),
        ("div.header", "div.nav-panel", "table.nav-panel"),
    ),
)


def detect(tree: HTMLTree, rules: tuple[GeneratorRules, ...]) -> GeneratorRules | None:
    """The rules of the generator that wrote the page, from its `<meta name="generator">`, or None."""
    if tree.head is None:
        return None
    for meta in tree.head.query_selector_all('meta[name="generator" i]'):
        content = (meta.getattr("content") or "").strip().lower()
        for r in rules:
            if content.startswith(r.meta_prefixes):
                return r
    return None


def check_selectors(selectors: tuple[str, ...]) -> None:
    """Raises ValueError naming the first selector lexbor cannot parse (at build time: it would
    otherwise fail on every page)."""
    probe = HTMLTree.parse("<html><body></body></html>")
    for selector in selectors:
        try:
            probe.body.query_selector_all(selector)
        except CSSParserException as e:
            raise ValueError(f"html.extra_navigation: {selector!r} is not a CSS selector ({e})") from None


def drop_navigation(tree: HTMLTree, selectors: tuple[str, ...]) -> int:
    """Removes the elements matching any selector (and their subtrees); returns how many."""
    if tree.body is None or not selectors:
        return 0
    matches = list(tree.body.query_selector_all(", ".join(selectors)))
    # only the outermost matches: decompose() frees a subtree, and a match inside it would then be a
    # dangling node (matches come in document order, so an ancestor precedes its descendants,
    # and a match inside an earlier one can only be inside the last outermost one)
    outermost: list = []
    for node in matches:
        if not (outermost and outermost[-1].contains(node)):
            outermost.append(node)
    for node in outermost:
        node.decompose()
    return len(outermost)
