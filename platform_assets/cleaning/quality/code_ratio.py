"""Prose documents that are mostly source code (lines that look like code; presets.CODE_RATIO)."""

from __future__ import annotations

import re
from collections import Counter
from typing import Literal

from platform_assets.cleaning import presets
from platform_assets.cleaning.quality.base import Count, Preset, Ratio, RuleSet, ScopedSettings
from platform_assets.cleaning.quality.text_view import TextView
from platform_assets.cleaning.steps import Drop


class CodeRatioSettings(ScopedSettings):
    """Remove prose documents that are mostly source code (lines that look like code)."""

    preset: Literal["code_ratio"] = "code_ratio"
    max_code_line_ratio: Ratio = presets.CODE_RATIO["max_code_line_ratio"]
    min_lines: Count = presets.CODE_RATIO["min_lines"]


# A line looks like code if it ends with ; { or }, or starts (after indentation) with a construct that
# prose lines do not start with. reST's "Example::" and Markdown are deliberately not code.
_CODE_LINE_RE = re.compile(
    r"[;{}][ \t]*+$"
    r"|^[ \t]*+(?:#include\b|#define\b|#!/|<\?php|import\s+[\w.]+|from\s+[\w.]+\s+import\b"
    r"|def\s+\w+\s*\(|class\s+\w+\s*[(:{]|function\s*\w*\s*\(|(?:var|let|const)\s+\w+\s*="
    r"|(?:public|private|protected|static)\s+\w|return\b|if\s*\(|for\s*\(|while\s*\(|[})\]];?$)"
)


class CodeRatio(RuleSet):
    preset = "code_ratio"
    s: CodeRatioSettings
    settings_type = CodeRatioSettings

    def check(self, view: TextView, counters: Counter[str]) -> Drop | None:
        lines = view.nonblank_lines
        if len(lines) < self.s.min_lines:
            return None
        code = sum(1 for ln in lines if _CODE_LINE_RE.search(ln))
        return self.drop_above("code_line_ratio", code / len(lines), self.s.max_code_line_ratio)


PRESET = Preset("code_ratio", CodeRatio)
