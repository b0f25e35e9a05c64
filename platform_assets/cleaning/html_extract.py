"""HTML to main text, boilerplate removed, with Resiliparse.

Why Resiliparse (2.0, Apache-2.0, a compiled wheel; no network, no model) rather than trafilatura
(2.3, what FineWeb used): both remove navigation, headers, footers and sidebars on our test pages,
but on a 100 KB article Resiliparse takes 1 ms and trafilatura 22 ms, trafilatura brings 12 packages
(lxml, dateparser, babel, ...), and DCLM (Li et al. 2024) found Resiliparse's extraction as good or
better for model quality. Its one weakness is its main-content heuristic on absurdly deep DOMs
(superlinear: 13 s at depth 20,000), which :class:`HtmlExtract` bounds by measuring the depth first
with a CSS selector (C speed: 12 ms on a 2.7 MB page).

Pages written by a documentation generator we know (`html_generators`) skip the heuristic: the
navigation their generator marks is dropped, the rest kept (the heuristic drops some bulleted lists
and the sidebar boxes there, and keeps some generators' Prev / Next bars).
"""

from __future__ import annotations

from collections import Counter

from resiliparse.extract.html2text import extract_plain_text
from resiliparse.parse.html import HTMLTree

from platform_assets.cleaning.html_generators import (
    COMMON_NAVIGATION,
    GENERATORS,
    check_selectors,
    detect,
    drop_navigation,
)
from platform_assets.cleaning.settings import HtmlSettings
from platform_assets.cleaning.steps import Doc, DocumentStep, Drop


def _depth_selector(depth: int) -> str:
    # "* > * > ... > *" with `depth` compounds matches an element with at least depth-1 element
    # ancestors, i.e. one at depth >= `depth` (the <html> element is at depth 1).
    return "*" + " > *" * (depth - 1)


class HtmlExtract(DocumentStep):
    """Replaces an HTML document's text by its main text.

    Rules: ``too_deep`` (DOM deeper than `max_depth`), ``no_text`` (nothing left: an empty page, a
    page that is all navigation, or not HTML at all). Counters: ``extracted``, and
    ``generator:<name>`` per page extracted with a generator's rules.
    """

    name = "html"

    def __init__(self, settings: HtmlSettings | None = None, **kwargs):
        settings = settings or HtmlSettings()
        super().__init__(modalities=settings.modalities, **kwargs)
        self.settings = settings
        self._too_deep = _depth_selector(settings.max_depth + 1)
        check_selectors(settings.extra_navigation)

    def extract(self, html: str) -> str | Drop:
        out = self.extract_with_generator(html)
        return out if isinstance(out, Drop) else out[0]

    def extract_with_generator(self, html: str) -> tuple[str, str | None] | Drop:
        """(main text, name of the generator whose rules were applied or None), or why not."""
        s = self.settings
        tree = HTMLTree.parse(html)
        if tree.document is not None and tree.document.query_selector(self._too_deep) is not None:
            return Drop("too_deep", f"> {s.max_depth}")
        generator = detect(tree, GENERATORS) if s.main_content and s.generator_rules else None
        drop_navigation(tree, s.extra_navigation + (COMMON_NAVIGATION + generator.navigation if generator else ()))
        text = extract_plain_text(
            tree,
            preserve_formatting=True,
            # the generator's own navigation is gone: everything left is main content
            main_content=s.main_content and generator is None,
            list_bullets=s.list_bullets,
            alt_texts=s.alt_texts,
            links=s.links,
            form_fields=s.form_fields,
            noscript=s.noscript,
            comments=s.comments,
        )
        return text, generator.name if generator else None

    def process(self, doc: Doc, counters: Counter[str]) -> Drop | None:
        out = self.extract_with_generator(doc.text)
        if isinstance(out, Drop):
            return out
        text, generator = out[0].strip(), out[1]
        if not text:
            return Drop("no_text")
        counters["extracted"] += 1
        if generator:
            counters[f"generator:{generator}"] += 1
        doc.text = text
        return None
