"""md_escape: untrusted text inside Streamlit Markdown shows verbatim and nothing in it is interpreted."""

from __future__ import annotations

import random
import re
import string

import pytest

from annotator.plain import md_escape, md_unescape

PAYLOAD = "**x** <img src=x onerror=alert(1)> :material/delete:"


def _interpreted(markdown: str) -> list[str]:
    """Constructs Streamlit would still act on in `markdown` (unescaped punctuation, shortcodes, arrows)."""
    found = []
    unescaped = re.sub(r"\\[" + re.escape(string.punctuation) + "]", "", markdown)
    found += [c for c in unescaped if c in string.punctuation]
    if ":material/" in markdown:  # replaced in the raw source before parsing
        found.append(":material/")
    if re.search(r":[\w+-]+[:\[]", markdown.replace("\\", "")):  # shortcodes and :color[...] on parsed text
        found.append("shortcode")
    if re.search(r"(^|\s)(<->|->|<-|--|>=|<=|~=)(\s|$)", markdown.replace("\\", "")):
        found.append("arrow")
    return found


@pytest.mark.parametrize(
    "text",
    [
        PAYLOAD,
        "![i](http://attacker.example/x.png) [a](javascript:alert(1))",
        ":red[red] :smile: :streamlit: $x^2$ $$y$$",
        "a -> b <- c <-> d -- e >= f <= g ~= h",
        "# heading\n- item\n1. one\n> quote\n    indented code\n\ttab",
        "`code` ~~strike~~ _em_ | table | &amp; &#58; \\ backslash",
        "",
    ],
)
def test_escaped_text_reads_back_verbatim_and_nothing_is_interpreted(text: str) -> None:
    escaped = md_escape(text)
    assert md_unescape(escaped) == text.replace("\t", " ")
    assert _interpreted(escaped) == []


def test_random_strings_round_trip() -> None:
    rng = random.Random(13)
    alphabet = string.printable.replace("\t", "").replace("\r", "").replace("\x0b", "").replace("\x0c", "")
    for _ in range(500):
        text = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 40)))
        escaped = md_escape(text)
        assert md_unescape(escaped) == text
        assert _interpreted(escaped) == []


def test_none_and_numbers() -> None:
    assert md_escape(None) == ""
    assert md_unescape(md_escape(3.5)) == "3.5"
