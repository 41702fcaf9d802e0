"""Byte order marks: the one table of which BOM means which encoding, for hierarchies and layout files."""

from __future__ import annotations

import codecs

#: (BOM, codec that decodes the BOM away). UTF-32 LE first: its BOM starts with UTF-16 LE's.
BOMS: tuple[tuple[bytes, str], ...] = (
    (codecs.BOM_UTF32_LE, "utf-32"),
    (codecs.BOM_UTF32_BE, "utf-32"),
    (codecs.BOM_UTF8, "utf-8-sig"),
    (codecs.BOM_UTF16_LE, "utf-16"),
    (codecs.BOM_UTF16_BE, "utf-16"),
)


def bom_encoding(data: bytes) -> str | None:
    """The codec named by `data`'s byte order mark ("utf-32", "utf-8-sig", "utf-16"), None without one."""
    for bom, encoding in BOMS:
        if data.startswith(bom):
            return encoding
    return None
