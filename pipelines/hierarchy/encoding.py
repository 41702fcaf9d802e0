"""Text encodings of hierarchy and layout files: the one table of which BOM means which encoding, and the one
detection of the encoding of bytes that are not what they declare (`decode_detected`)."""

from __future__ import annotations

import codecs
import re

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


#: Candidates of charset-normalizer tried, best first, before giving up on a strict decode.
MAX_CANDIDATES = 3
#: Bytes of non-ASCII runs given to the detector: the markup around them is ASCII in every candidate and only
#: dilutes the signal (two Chinese words in a dump were read as Latin-10 among their markup, as GB18030 alone).
SAMPLE_BYTES = 1 << 16
#: charset-normalizer's chaos threshold for the second pass, when its default (0.2) leaves no candidate.
LOOSE_CHAOS = 0.35
#: Fewer non-ASCII bytes than this are too little to tell an encoding by (one stray byte reads as a letter in
#: every code page): they stay U+FFFD.
MIN_EVIDENCE = 8
_NON_ASCII = re.compile(rb"[\x80-\xff]+")


def _mostly_utf8(data: bytes) -> bool:
    """True when the bytes hold at least as many well-formed UTF-8 multi-byte characters as bad bytes: a UTF-8
    file with a few damaged bytes, which detection would misread as a one-byte code page."""
    text = data.decode("utf-8", errors="replace")
    bad = text.count("\ufffd") - data.count(b"\xef\xbf\xbd")
    good = sum(1 for ch in text if ch > "\x7f") - text.count("\ufffd")
    return good >= bad


def decode_detected(data: bytes, declared: str, first_bad: int) -> tuple[str, str]:
    """(text, warning) of bytes that are not valid in their `declared` encoding (e.g. CP949 bytes under a UTF-8
    declaration, which real dumps have): the encoding charset-normalizer finds, when its strict decode takes
    every byte (detected on the non-ASCII runs, checked on all the bytes); else `declared` with U+FFFD for the bad bytes (also for a UTF-8 file with a few damaged bytes
    among more good multi-byte characters). The warning names what was used."""
    fallback = f"bytes invalid in {declared} replaced by U+FFFD (first at byte {first_bad})"
    utf8 = codecs.lookup(declared).name == "utf-8"
    try:
        from charset_normalizer import from_bytes
    except ImportError:  # a dependency of the project; kept working without it
        from_bytes = None
    if from_bytes is not None and not (utf8 and _mostly_utf8(data)):
        seen = {codecs.lookup(declared).name}
        sample = bytearray()
        for run in _NON_ASCII.finditer(data):
            sample += run.group() + b" "
            if len(sample) >= SAMPLE_BYTES:
                break
        candidates = []
        if len(sample) - sample.count(b" ") >= MIN_EVIDENCE:
            # charset-normalizer's default chaos threshold (0.2) refuses short CJK texts dense in full-width
            # punctuation (a 107-byte GBK eventStructs.txt scores 0.29 whole, 0.34 as runs): a second pass over
            # the bytes as they are, with a looser threshold; every candidate is still strict-decoded below
            candidates = list(from_bytes(bytes(sample))) or list(
                from_bytes(bytes(data[:SAMPLE_BYTES]), threshold=LOOSE_CHAOS)
            )
        for match in candidates[: MAX_CANDIDATES + 1]:
            try:
                name = codecs.lookup(match.encoding).name
            except LookupError:
                continue
            if name in seen:
                continue
            seen.add(name)
            try:
                text = data.decode(name)
            except UnicodeDecodeError:
                continue
            return text, (
                f"bytes invalid in the declared {declared} (first at byte {first_bad}): decoded as {name}, "
                f"the encoding detected by charset-normalizer"
            )
    return data.decode(declared, errors="replace"), fallback
