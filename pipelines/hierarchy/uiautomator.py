"""uiautomator XML dumps (and the Appium UiAutomator2 page source) -> `Screen`.

Well-formed UTF-8 dumps take a fast path straight into lxml. Anything lxml refuses goes through a repair pass
that undoes what shell redirects do to dumps (UTF-16 with a BOM under a UTF-8 declaration, log lines before or
after the XML, CR CR LF line endings) and strips characters XML forbids; each repair adds a warning. Dumps that
are an error message (`ERROR: null root node returned by UiTestAutomationBridge.`) raise `failed_dump`.
DOCTYPE and ENTITY declarations are refused before lxml sees the bytes, so no entity is ever expanded and no
file or URL is ever read.
"""

from __future__ import annotations

import codecs
import re
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from itertools import compress, repeat
from operator import eq, itemgetter, ne

from lxml import etree

from .bounds import from_strings_sized
from .encoding import bom_encoding, decode_detected
from .errors import HierarchyError
from .objects import (
    MAX_DEPTH,
    MAX_OBJECTS,
    RawColumns,
    Screen,
    Template,
    build_columns,
    check_size,
    new_columns,
    resolve_screen_size,
    template,
    too_large,
)

FORMAT = "uiautomator"

_FORBIDDEN_BYTES = re.compile(rb"<!\s*(?i:doctype|entity)")
_FORBIDDEN_TEXT = re.compile(r"<!\s*(?i:doctype|entity)")
_XML_START = re.compile(r"<(?:\?xml|hierarchy)\b")
_DECLARATION = re.compile(r"\A\s*<\?xml[^>]*\?>")
_DECLARED_ENCODING = re.compile(rb"""encoding\s*=\s*["']([A-Za-z0-9._-]+)["']""")
_INVALID_RAW = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ufffe\uffff\ud800-\udfff]")
_CHAR_REF = re.compile(r"&#(x[0-9A-Fa-f]+|[0-9]+);")
# What `uiautomator dump` prints instead of a hierarchy: "ERROR: ..." lines, the idle-state failure (also seen
# without its "ERROR:" prefix) and Java exceptions from the dump tool. Two patterns that each run in time linear
# in the text: one anchored at a line start (leading blanks never span lines, so no backtracking across lines)
# and plain phrases found anywhere; the line holding the first hit is the message.
_ERROR_LINE_START = re.compile(
    r"^[^\S\n]*(?:ERROR:|Exception in thread |java\.[\w.$]+(?:Exception|Error)\b)",
    re.MULTILINE | re.IGNORECASE,
)
_ERROR_PHRASE = re.compile(r"could not get idle state|null root node returned", re.IGNORECASE)

_local = threading.local()


# Boolean attributes in RawNode.flags order (visible comes from visible-to-user/displayed), with the value
# assumed when the attribute is absent.
_FLAG_ATTRIBUTES = (
    ("clickable", "false"),
    ("enabled", "true"),
    ("focusable", "false"),
    ("focused", "false"),
    ("scrollable", "false"),
    ("long-clickable", "false"),
    ("selected", "false"),
    ("checkable", "false"),
    ("checked", "false"),
)
_USUAL_NAMES = ("class", "package", "text", "content-desc", "bounds", *(name for name, _ in _FLAG_ATTRIBUTES))
_USUAL_KEYS = frozenset(_USUAL_NAMES)
# Attributes only some dumps write (resource-id since API 18, hint since API 26, visible-to-user since
# API 29), with the value assumed when a node has none; "displayed" (Appium) stands in for visible-to-user.
_OPTIONAL = {"resource-id": "", "hint": "", "visible-to-user": None}
# The columns `columns()` reads, by name: class, package, text, content-desc, bounds, the optional ones, then
# the flags (a layout turns them into positions in its `names`).
_COLUMN_NAMES = (*_USUAL_NAMES[:5], *_OPTIONAL)
_FLAG_NAMES = tuple(name for name, _ in _FLAG_ATTRIBUTES)
# (visible, raw flag attribute strings) -> flags tuple; dumps repeat a handful of combinations.
_FLAGS: dict[tuple[bool, ...], tuple[bool, ...]] = {}


def _flags(key: tuple) -> tuple[bool, ...]:
    visible, *values = key
    clickable, enabled, *rest = (value == "true" for value in values)
    flags = (clickable, visible, values[1] != "false", *rest)
    if len(_FLAGS) < 4096:
        _FLAGS[key] = flags
    return flags


def _local_names(tag: str, attrib: dict[str, str]) -> tuple[str, dict[str, str]]:
    """Tag and attribute names without their "{namespace}" part (the first of two same local names wins)."""
    local: dict[str, str] = {}
    for name, value in attrib.items():
        local.setdefault(name.rsplit("}", 1)[-1], value)
    return tag.rsplit("}", 1)[-1], local


# Value assumed for a missing attribute (None for those no field uses).
_DEFAULTS = {"package": "", "text": "", "content-desc": "", **_OPTIONAL, **dict(_FLAG_ATTRIBUTES)}
# The attributes a node's `objects.Template` depends on, as `_Layout.template_of` reads them.
_TEMPLATE_NAMES = ("class", "package", "visible-to-user", *(name for name, _ in _FLAG_ATTRIBUTES))
_TEMPLATE_FLAGS = itemgetter(4)  # Template.flags
# A row's template attribute values as one string: XML text cannot hold NUL, so the key is unambiguous, and
# hashing one string is cheaper than hashing a tuple of a dozen new ones.
_KEY_JOIN = "\0".join
# Bounds of the caches (at most 64 x 1024 keys of ~0.5 KB: ~32 MB however many devices a dataset mixes).
_LAYOUTS_MAX = 64
_TEMPLATE_CACHE_MAX = 1024


@dataclass(frozen=True)
class _Layout:
    """How the rows of dumps whose first node has the attribute names `first` are read (dumps of one device
    share one)."""

    first: tuple[str, ...]  # the first node's attribute names
    names: tuple[str, ...]  # `first`, then the usual and optional names it lacks
    defaults: tuple[str | None, ...]  # of `names`
    row: Callable[[dict[str, str]], tuple]  # the values of the first node's names, in one C call
    tail: tuple[str | None, ...]  # default values of the names the first node lacks
    size: int  # attribute count of a node that takes the fast path; -2: none does
    # The `_TEMPLATE_NAMES` the first node has, picked from a row or from the transposed rows' columns (None
    # when it lacks class or package), and the templates already made from them.
    template_key: Callable[[Sequence], tuple] | None
    templates: dict[str, Template]  # by the `_KEY_JOIN` of a row's template attribute values
    # The `_COLUMN_NAMES` and `_FLAG_NAMES` columns of the transposed rows (in `names` order).
    columns: Callable[[list], tuple]
    flag_columns: Callable[[list], tuple]

    def template_of(self, key: str) -> Template:
        """The template of a row whose `template_key` is `key` (the names the first node lacks at their
        default: callers use this only when no node set one)."""
        values = dict(zip((name for name in _TEMPLATE_NAMES if name in self.first), key.split("\0"), strict=True))
        android_class, package, shown, *raw_flags = (values.get(n, _DEFAULTS.get(n)) for n in _TEMPLATE_NAMES)
        flag_key = (shown != "false", *raw_flags)
        flags = _FLAGS.get(flag_key) or _flags(flag_key)
        found = template((android_class, package, (), flags))
        if len(self.templates) >= _TEMPLATE_CACHE_MAX:
            self.templates.clear()
        self.templates[key] = found
        return found


# First nodes' attribute names -> their row layout.
_LAYOUTS: dict[tuple[str, ...], _Layout] = {}


def _new_layout(first: tuple[str, ...]) -> _Layout:
    tail_names = tuple(name for name in (*_USUAL_NAMES, *_OPTIONAL) if name not in first)
    row = itemgetter(*first) if len(first) > 1 else (lambda a: (a[first[0]],) if first else ())
    # Dumps that lack a usual attribute, say "displayed" (Appium) or NAF on their first node take `_row`.
    usual = all(name in _OPTIONAL for name in tail_names)
    size = len(first) if usual and "displayed" not in first and "NAF" not in first else -2
    names = first + tail_names
    defaults = tuple(_DEFAULTS.get(name) for name in names)
    key_at = [first.index(name) for name in _TEMPLATE_NAMES if name in first]
    template_key = itemgetter(*key_at) if "class" in first and "package" in first else None
    tail = tuple(_OPTIONAL.get(name) for name in tail_names)
    columns = itemgetter(*(names.index(name) for name in _COLUMN_NAMES))
    flag_columns = itemgetter(*(names.index(name) for name in _FLAG_NAMES))
    return _Layout(first, names, defaults, row, tail, size, template_key, {}, columns, flag_columns)


class _Collector:
    """lxml parser target that turns each element into a row of attribute values while libxml2 reads.

    Every element below `<hierarchy>` is a node, whatever its tag (`node` in uiautomator dumps, the class name
    in Appium page sources). A dump without `<hierarchy>` whose root element has `bounds` is one window.
    `start` runs once per view, so its usual path is a single C-level fetch of the row and the node's level
    (elements started before it minus those ended: its depth in the XML); `columns` then computes the rest
    column by column, parents from the levels. `end` only counts: it is a C-level append (lxml reads it once,
    when the parser is made), which saves a Python call per element.
    """

    def __init__(self) -> None:
        self.ends: list[str] = []  # tags of the elements ended so far
        self.end = self.ends.append

    def reset(self, drop_invisible: bool) -> None:
        self.drop_invisible = drop_invisible
        self.ends.clear()
        # Row layout: the attribute names of the first node plus any usual or optional one it lacks. A node
        # with as many attributes as the first one, all of the first one's names among them, has exactly its
        # names: its row is one C-level fetch (`row`). Any other node goes through `_row`.
        self.layout: _Layout | None = None
        # The layout's `row` and `size`, read by `start` for every node (the size is -2 in drop_invisible mode).
        self.row: Callable[[dict[str, str]], tuple] | None = None
        self.row_size = -1  # attributes of the first node; -1 until it is seen
        self.rows: list[tuple] = []
        self.levels: list[int] = []  # of each node: the <hierarchy> is level 0, its windows level 1
        self.skipped = 0  # elements started that are not nodes (<hierarchy>, dropped ones)
        self.drop_level = -1  # level of the dropped subtree being read; -1 outside one
        self.naf: list[int] = []  # nodes with NAF="true"
        self.tails: dict[int, tuple[str | None, ...]] = {}  # values of names the first node lacks, when set
        self.top: dict[str, str] | None = None
        self.root_tag: str | None = None  # None until the root element starts
        self.dropped = 0

    def start(self, tag: str, attrib: dict[str, str]) -> None:
        if len(attrib) != self.row_size:  # the root, dumps in drop_invisible mode, nodes unlike the first
            self._start(tag, attrib)
            return
        try:
            row = self.row(attrib)  # type: ignore[misc]
        except KeyError:  # some other attribute names (e.g. namespaced)
            self._start(tag, attrib)
            return
        rows = self.rows
        index = len(rows)
        if index >= MAX_OBJECTS:
            raise too_large()
        rows.append(row)
        self.levels.append(index + self.skipped - len(self.ends))

    def _layout(self, attrib: dict[str, str]) -> None:
        """The row layout, from the first node (see `reset`)."""
        first = tuple(attrib)
        layout = _LAYOUTS.get(first)
        if layout is None:
            layout = _new_layout(first)
            if len(_LAYOUTS) < _LAYOUTS_MAX:
                _LAYOUTS[first] = layout
        self.layout = layout
        self.row, self.row_size = layout.row, layout.size
        if self.drop_invisible:  # every node's visibility is checked in _start
            self.row_size = -2

    def _row(self, attrib: dict[str, str], tag: str) -> tuple[str | None, ...]:
        """The row of any node, by name (Appium, hand-made, damaged dumps, nodes unlike the first): the
        values of the first node's names, and in `tails` those of the names it lacks when not the default."""
        get = attrib.get
        index = len(self.rows)
        naf = get("NAF")
        if naf == "true":
            self.naf.append(index)
        if naf is not None and len(attrib) == self.row_size + 1:
            # The first node's names and NAF (how dumps mark views without a label): the one C-level fetch.
            try:
                return self.row(attrib)  # type: ignore[misc]
            except KeyError:
                pass
        layout = self.layout
        assert layout is not None  # set from the first node before any row
        names = layout.names
        row = list(map(get, names, layout.defaults))
        if not _USUAL_KEYS <= attrib.keys():  # the tag stands in for a missing or empty class
            row[names.index("class")] = get("class") or (tag if tag != "node" else "")
        shown = names.index("visible-to-user")
        first = len(layout.first)
        if row[shown] is None:
            row[shown] = get("displayed")  # Appium
            if row[shown] is None and shown < first:
                # Unstated on this node though the first node states it: shown, like any value but "false"
                # ("", unlike None, can join the first node's template key).
                row[shown] = ""
        if row[first:] != list(layout.tail):
            self.tails[index] = tuple(row[first:])
        return tuple(row[:first])

    def _start(self, tag: str, attrib: dict[str, str]) -> None:
        """`start` for the root, window roots, dropped subtrees, namespaced or non-`node` tags."""
        level = len(self.rows) + self.skipped - len(self.ends)
        if self.drop_level >= 0:
            if level > self.drop_level:  # inside a dropped subtree
                self.skipped += 1
                self.dropped += 1
                return
            self.drop_level = -1
        if tag[:1] == "{":  # namespaced page source: use local names (lxml gives "{uri}name")
            tag, attrib = _local_names(tag, attrib)
        if self.root_tag is None:
            self.root_tag = tag
            if tag == "hierarchy":
                self.top = attrib
                self.skipped += 1
                return
            if "bounds" not in attrib:
                raise HierarchyError("malformed", f"root element <{tag}> is not a view hierarchy")
        if self.drop_invisible:
            shown = attrib.get("visible-to-user")
            if shown is None:
                shown = attrib.get("displayed")  # Appium
            if shown == "false":
                self.drop_level = level
                self.skipped += 1
                self.dropped += 1
                return
        rows = self.rows
        index = len(rows)
        if index >= MAX_OBJECTS:
            raise too_large()
        if self.row is None:
            self._layout(attrib)
            # The first node has exactly the layout's names: its row is the one C-level fetch.
            fetch = self.row_size == len(attrib) and tag == "node"
            rows.append(self.row(attrib) if fetch else self._row(attrib, tag))  # type: ignore[misc]
        else:
            rows.append(self._row(attrib, tag))
        self.levels.append(level)

    def close(self) -> _Collector:
        return self

    @property
    def windows(self) -> int:
        return self.levels.count(0 if self.top is None else 1)

    def columns(
        self,
    ) -> tuple[RawColumns, list[str] | None, list[Sequence[int] | None], list[Template] | None, bool]:
        """The collected nodes as `RawColumns`, their boxes as "l,t,r,b" texts when the dump wrote them so
        (see `bounds.from_strings`), the window roots' boxes, the nodes' templates when every node has the
        first one's names (else None: `build_columns` finds them from the flags), and whether every box is
        small (`bounds.from_strings_sized`)."""
        rows, levels = self.rows, self.levels
        n = len(rows)
        if not n:
            return RawColumns(*([()] * len(RawColumns._fields))), None, [], None, False
        deepest = max(levels)
        if deepest - (self.top is not None) > MAX_DEPTH:
            raise HierarchyError("too_deep", f"XML nested deeper than {MAX_DEPTH} levels")
        # Parent, depth and position among siblings in one pass. A node's parent is the latest node one level
        # up (`latest`; a window root's level-up slot is never set, or is the extra last one: -1); a window
        # root's parent -1 reads the extra last slot of `depths` and `counts`.
        latest = [-1] * (deepest + 2)
        parents = [0] * n
        depths = [0] * (n + 1)
        depths[n] = -1
        counts = [0] * (n + 1)
        siblings = [0] * n
        for i, level in enumerate(levels):
            parents[i] = p = latest[level - 1]
            latest[level] = i
            depths[i] = depths[p] + 1
            siblings[i] = sibling = counts[p]
            counts[p] = sibling + 1
        depths.pop()
        layout = self.layout
        assert layout is not None  # set by the first node
        values = list(zip(*rows, strict=True))
        for j, default in enumerate(layout.tail):  # names the first node lacks: mostly their default
            column = [default] * n
            for i, tail in self.tails.items():
                column[i] = tail[j]
            values.append(column)
        classes, packages, texts, descs, bounds, resource_ids, hints, shown = layout.columns(values)
        templates: list[Template] | None = None
        if layout.template_key is not None and not self.tails:
            # Each row's template attributes, looked up as they are; taken from the columns, as zip hands join
            # one reused tuple where a per-row fetch would make a new one for every row.
            keys = list(map(_KEY_JOIN, zip(*layout.template_key(values), strict=True)))
            templates = list(map(layout.templates.get, keys))
            if None in templates:
                templates = [t or layout.template_of(k) for t, k in zip(templates, keys, strict=True)]
            flags = list(map(_TEMPLATE_FLAGS, templates))
        else:
            keys = list(zip(map(ne, shown, repeat("false")), *layout.flag_columns(values), strict=True))
            flags = list(map(_FLAGS.get, keys))
            if None in flags:
                flags = [f or _flags(k) for f, k in zip(flags, keys, strict=True)]
        boxes, box_texts, small_boxes = from_strings_sized(bounds)
        naf = [False] * n
        for i in self.naf:
            naf[i] = True
        columns = new_columns((
            parents, depths, siblings, classes, packages, texts, descs, resource_ids, hints, boxes, flags,
            [None] * n, [()] * n, naf,
        ))  # fmt: skip
        roots = list(compress(boxes, map(eq, parents, repeat(-1))))
        return columns, box_texts, roots, templates, small_boxes


def _parser() -> tuple[etree.XMLParser, _Collector]:
    """One hardened parser and its collector per thread (lxml parsers must not be shared between threads)."""
    pair = getattr(_local, "pair", None)
    if pair is None:
        collector = _Collector()
        parser = etree.XMLParser(
            target=collector,
            resolve_entities=False,
            no_network=True,
            load_dtd=False,
            dtd_validation=False,
            huge_tree=True,  # lifts libxml2's depth limit from 256 to 2048; MAX_DEPTH (2000) is ours
        )
        pair = _local.pair = (parser, collector)
    return pair


def failed_dump_message(text: str) -> str | None:
    """The dump tool's error line when `text` holds one (e.g. "ERROR: could not get idle state."), else None."""
    hits = [m.start() for m in (_ERROR_LINE_START.search(text), _ERROR_PHRASE.search(text)) if m is not None]
    if not hits:
        return None
    at = min(hits)
    end = text.find("\n", at)
    return text[text.rfind("\n", 0, at) + 1 : end if end >= 0 else len(text)].strip()


def _valid_xml_char(code: int) -> bool:
    return (
        code in (0x9, 0xA, 0xD)
        or 0x20 <= code <= 0xD7FF
        or 0xE000 <= code <= 0xFFFD
        or 0x10000 <= code <= 0x10FFFF
    )


def _decode(data: bytes, warnings: list[str]) -> str:
    bom = bom_encoding(data)
    if bom in ("utf-16", "utf-32"):
        name = bom.upper()
        declared = _DECLARED_ENCODING.search(data[:800].replace(b"\x00", b""))
        if declared and declared.group(1).lower().replace(b"_", b"-") in (b"utf-8", b"utf8"):
            warnings.append(f"{name} text with a BOM under a UTF-8 declaration (decoded as {name})")
        else:
            warnings.append(f"{name} text with a BOM (decoded as {name})")
        return data.decode(bom, errors="replace")
    if bom is not None:  # UTF-8
        data = data[len(codecs.BOM_UTF8) :]
    head = data[:200]
    if head.count(b"\x00") > len(head) // 4:
        encoding = "utf-16-be" if head[:1] == b"\x00" else "utf-16-le"
        warnings.append(f"UTF-16 text without a BOM (decoded as {encoding})")
        return data.decode(encoding, errors="replace")
    declared = _DECLARED_ENCODING.search(data[:200])
    encoding = declared.group(1).decode("ascii").lower() if declared else "utf-8"
    try:
        codecs.lookup(encoding)
    except LookupError:
        warnings.append(f"unknown declared encoding {encoding!r} (decoded as UTF-8)")
        encoding = "utf-8"
    if encoding.replace("_", "-") in ("utf-16", "utf-16le", "utf-16be", "utf-16-le", "utf-16-be"):
        encoding = "utf-8"  # a UTF-16 declaration on 8-bit bytes is a lie the BOM check already ruled out
    try:
        return data.decode(encoding)
    except UnicodeDecodeError as exc:
        text, warning = decode_detected(data, encoding, exc.start)
        warnings.append(warning)
        return text


def _excerpt(text: str, limit: int = 60) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _repair(data: bytes, warnings: list[str]) -> bytes:
    """Text of a damaged dump made parseable, or the HierarchyError that explains why it cannot be."""
    text = _decode(data, warnings)
    if not text.strip():
        raise HierarchyError("empty", "the hierarchy file holds only whitespace")
    if _FORBIDDEN_TEXT.search(text):  # anywhere, even in text that would be cut off as a log line
        raise HierarchyError("forbidden_entity", "XML with a DOCTYPE/ENTITY declaration is refused")
    start = _XML_START.search(text)
    if start is None:
        error = failed_dump_message(text)
        if error is not None:
            raise HierarchyError("failed_dump", f"uiautomator failed: {error}")
        first = text.find("<")
        if first < 0:
            raise HierarchyError("malformed", f"no XML in the file (starts with {_excerpt(text)!r})")
        start_at = first
    else:
        start_at = start.start()
    end = text.rfind("</hierarchy>")
    end_at = end + len("</hierarchy>") if end >= 0 else text.rfind(">") + 1
    if end > 0:
        previous_end = text.rfind("</hierarchy>", start_at, end)
        if previous_end >= 0:  # several dumps appended to one file (`>>`): the last one is the newest
            count = text.count("</hierarchy>", start_at, end_at)
            last = _XML_START.search(text, previous_end + len("</hierarchy>"))
            if last is not None:
                start_at = last.start()
                warnings.append(f"{count} dumps in one file: the last one is used")
    prefix = text[:start_at]
    if prefix.strip():
        warnings.append(f"ignored text before the XML: {_excerpt(prefix)!r}")
    suffix = text[end_at:]
    if suffix.strip():
        warnings.append(f"ignored text after the XML: {_excerpt(suffix)!r}")
    text = _DECLARATION.sub("", text[start_at:end_at], count=1)
    if "\r" in text:
        if "\r\r\n" in text:
            warnings.append("CR CR LF line endings (a shell redirect) normalised")
        text = text.replace("\r\n", "\n").replace("\r", "\n")
    stripped = 0

    def drop_ref(match: re.Match[str]) -> str:
        nonlocal stripped
        ref = match.group(1)
        if len(ref) <= 10:  # longer references are out of range anyway (and int() limits digit counts)
            code = int(ref[1:], 16) if ref[0] in "xX" else int(ref)
        else:
            code = -1
        if _valid_xml_char(code):
            return match.group(0)
        stripped += 1
        return ""

    text, raw = _INVALID_RAW.subn("", text)
    if "&#" in text:
        text = _CHAR_REF.sub(drop_ref, text)
    if raw or stripped:
        warnings.append(f"removed {raw + stripped} character(s) not allowed in XML")
    if _FORBIDDEN_TEXT.search(text):  # again: removing characters may have joined "<" and "!DOCTYPE"
        raise HierarchyError("forbidden_entity", "XML with a DOCTYPE/ENTITY declaration is refused")
    return text.encode("utf-8")


def _collect(data: bytes, drop_invisible: bool) -> _Collector:
    parser, collector = _parser()
    collector.reset(drop_invisible)
    try:
        return etree.fromstring(data, parser)
    except etree.XMLSyntaxError as exc:
        if "Excessive depth" in str(exc):
            raise HierarchyError("too_deep", f"XML nested deeper than {MAX_DEPTH} levels") from None
        raise


def _load(data: bytes, warnings: list[str], drop_invisible: bool) -> _Collector:
    if not data or data.isspace():  # (not strip(), which copies the whole file)
        raise HierarchyError("empty", "the hierarchy file is empty")
    check_size(data)
    if b"!" in data and _FORBIDDEN_BYTES.search(data):  # "!" is one memchr; "<!" a slow scan of every "<"
        raise HierarchyError("forbidden_entity", "XML with a DOCTYPE/ENTITY declaration is refused")
    # Fast path for 8-bit text only: UTF-16/32 (NUL bytes) is decoded by _repair, whose checks see the text.
    if (data[:1] == b"<" or data.lstrip()[:1] == b"<") and b"\x00" not in data[:256]:
        try:
            return _collect(data, drop_invisible)
        except etree.XMLSyntaxError:
            pass  # damaged: repair below and try once more
    repaired = _repair(data, warnings)
    try:
        return _collect(repaired, drop_invisible)
    except etree.XMLSyntaxError as exc:
        raise HierarchyError("malformed", f"not well-formed XML: {exc}") from None


def _int_attr(value: str | None, default: int = 0) -> int:
    try:
        return int(value) if value is not None else default
    except ValueError:
        return default


_AMP = "&#38;"


def _unescape_ampersands(columns):
    """libxml2 without entity substitution (the hardened parser) hands an attribute's `&amp;` on as the text
    `&#38;` ("Security &amp; privacy" became "Security &#38; privacy"); it writes every `&` so, a literal
    `&#38;` too (`&amp;#38;` arrives as `&#38;#38;`), so replacing it back is exact. Only the text columns can
    hold one in practice."""
    fixed = {}
    for name in ("text", "content_desc", "resource_id", "hint"):
        values = getattr(columns, name)
        if any(_AMP in v for v in values if v):
            fixed[name] = [v.replace(_AMP, "&") if v and _AMP in v else v for v in values]
    return columns._replace(**fixed) if fixed else columns


def parse(
    data: bytes,
    *,
    drop_invisible: bool = False,
    screen_size: tuple[int, int] | None = None,
) -> Screen:
    """Objects of a uiautomator/Appium dump in pre-order; see `schemas/objects.md` for every field.

    `Screen.width`/`height`: `screen_size` when given, else the `<hierarchy width height>` attributes (Appium),
    else the largest right/bottom edge of the window roots. They are in the dump's own coordinates: for a
    rotated screen (`rotation` 1 or 3) that is the rotated, landscape display (no transform is applied).
    `drop_invisible` leaves out nodes with `visible-to-user="false"` (or Appium `displayed="false"`) together
    with their subtrees.
    """
    warnings: list[str] = []
    found = _load(bytes(data), warnings, drop_invisible)
    top = found.top
    if top is None:
        warnings.append(f"no <hierarchy> element: the root <{found.root_tag}> is the only window")
    elif not found.windows and not found.dropped:
        raise HierarchyError("failed_dump", "the <hierarchy> holds no window (an empty dump)")
    if found.dropped:
        warnings.append(f"dropped {found.dropped} node(s): invisible ones and their subtrees")
    rotation = _int_attr(top.get("rotation")) if top is not None else 0
    if rotation not in (0, 1, 2, 3):  # Surface.ROTATION_0..ROTATION_270
        warnings.append(f"rotation {top.get('rotation')!r} is not 0-3: taken as 0")
        rotation = 0

    columns, box_texts, root_boxes, templates, small_boxes = found.columns()
    if b"&" in data:
        columns = _unescape_ampersands(columns)
    stated = None
    if top is not None:  # Appium page sources state the size on the root
        stated_w, stated_h = _int_attr(top.get("width")), _int_attr(top.get("height"))
        if 0 < stated_w < 2**31 and 0 < stated_h < 2**31:
            stated = (stated_w, stated_h)
    width, height, estimated, from_windows = resolve_screen_size(screen_size, stated, root_boxes, warnings)
    return build_columns(
        columns,
        width,
        height,
        rotation=rotation,
        fmt=FORMAT,
        warnings=warnings,
        size_estimated=estimated,
        size_from_windows=from_windows,
        box_texts=box_texts,
        templates=templates,
        small_boxes=small_boxes,
    )
