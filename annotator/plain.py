"""Untrusted text (study names, tags, notes, user names, trace text) shown as plain text inside Markdown.

Streamlit renders Markdown almost everywhere (`st.markdown`, captions, toasts, alerts, widget labels), plus its
own extensions: emoji and `:material/...:` icon shortcodes, `:red[...]` colouring, `$...$` LaTeX and
whitespace-delimited arrows (`->` becomes an arrow). Prefer `st.text`/`st.code`/dataframes for a string on its
own; when it has to sit inside Markdown, pass it through `md_escape` first.

Backslash escapes are enough for CommonMark, but Streamlit applies shortcodes, colouring and arrows to the
*parsed* text (after escapes are resolved) and turns `:material/` into an icon name before parsing, so an
invisible U+200B (zero-width space) is put after every `:` and inside the arrow sequences: the text reads the
same and nothing in it is interpreted.
"""

from __future__ import annotations

import re
import string

ZWSP = "\u200b"
NBSP = "\u00a0"
_LEADING = re.compile(r"^[ \t]+")
# Every ASCII punctuation character may be backslash-escaped in CommonMark; escaping them all is the safe choice.
_PUNCT = re.compile("([" + re.escape(string.punctuation) + "])")
# Streamlit's typographic replacements (only between whitespace, but cheap to break everywhere).
_ARROWS = re.compile(r"(<->|->|<-|--|>=|<=|~=)")


def md_escape(text: object) -> str:
    """`text` as Markdown that Streamlit shows verbatim (no formatting, links, images, HTML, icons, LaTeX)."""
    value = "" if text is None else str(text)
    value = _ARROWS.sub(lambda m: ZWSP.join(m.group(0)), value)
    value = _PUNCT.sub(r"\\\1", value)
    value = value.replace(":", ":" + ZWSP)
    # A line break must stay one (two trailing spaces); leading blanks must not make a code block (NBSP instead).
    return "  \n".join(_LEADING.sub(lambda m: NBSP * len(m.group(0)), line) for line in value.split("\n"))


def md_unescape(markdown: str) -> str:
    """The text a `md_escape`d string shows (for tests and for reading a rendered value back)."""
    value = markdown.replace("  \n", "\n").replace(ZWSP, "")
    value = re.sub(r"(?m)^\u00a0+", lambda m: " " * len(m.group(0)), value)
    return re.sub(r"\\([" + re.escape(string.punctuation) + "])", r"\1", value)
