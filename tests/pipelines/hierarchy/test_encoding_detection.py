"""Dumps whose bytes are not their declared encoding are decoded in the encoding charset-normalizer detects,
with a warning naming it; U+FFFD only when nothing better decodes them (a UTF-8 file with a damaged byte)."""

from __future__ import annotations

import json
import re

from pipelines.hierarchy import parse
from tests.conftest import FIXTURES

#: Korean settings texts, as a phone set to Korean shows them (25, as in the dump the issue reports).
KOREAN = [
    "설정", "와이파이", "블루투스", "디스플레이", "소리 및 진동", "알림", "배터리", "저장공간", "보안", "개인정보 보호",
    "위치", "계정", "구글", "시스템", "휴대전화 정보", "검색", "뒤로", "메뉴", "홈", "최근 앱", "확인", "취소", "다음",
    "이전", "완료",
]  # fmt: skip


def korean_dump() -> str:
    """A real dump (fixtures/uiautomator/UltraNavbar_uidump.xml) whose texts are replaced by Korean ones."""
    text = (FIXTURES / "uiautomator" / "UltraNavbar_uidump.xml").read_text(encoding="utf-8")
    count = iter(range(10**6))
    return re.sub(r'text="[^"]*"', lambda m: f'text="{KOREAN[next(count) % len(KOREAN)]}"', text)


def test_cp949_under_a_utf8_declaration() -> None:
    text = korean_dump()
    assert "encoding='UTF-8'" in text[:100] or 'encoding="UTF-8"' in text[:100]
    reference = parse(text.encode("utf-8"))
    screen = parse(text.encode("cp949"))
    assert [o.text for o in screen.objects] == [o.text for o in reference.objects]
    assert sum(1 for o in screen.objects if o.text in KOREAN) >= 25
    assert not any("\ufffd" in o.text for o in screen.objects)
    (warning,) = [w for w in screen.warnings if "declared" in w]
    assert "bytes invalid in the declared utf-8" in warning and "decoded as cp949" in warning


def test_gbk_chinese_fixture_under_its_utf8_declaration() -> None:
    data = (FIXTURES / "uiautomator" / "avc_mocks_UIAUTOMATOR_DUMP_API17_CHINESE.xml").read_bytes()
    reference = parse(data)
    screen = parse(data.decode("utf-8").encode("gb18030"))
    texts = [o.text for o in reference.objects]
    assert sum(1 for t in texts if any(ord(c) > 0x2E80 for c in t)) >= 2  # its real Chinese texts
    assert [o.text for o in screen.objects] == texts
    assert any("decoded as gb" in w for w in screen.warnings)  # gb18030 or its subset gbk / gb2312


def test_json_state_in_cp949() -> None:
    state = {"a11y_tree": [{"className": "android.widget.TextView", "text": t, "bounds": f"0, {i * 80}, 1080, {i * 80 + 80}",
                            "resourceId": "", "children": []} for i, t in enumerate(KOREAN)],
             "phone_state": {"packageName": "com.android.settings"}}  # fmt: skip
    screen = parse(json.dumps(state, ensure_ascii=False).encode("cp949"))
    assert [o.text for o in screen.objects] == KOREAN
    assert any("decoded as cp949" in w for w in screen.warnings)


def test_a_damaged_utf8_byte_stays_replacement() -> None:
    text = korean_dump()
    data = text.encode("utf-8")
    cut = data.index("설정".encode()) + 1  # a lone byte out of a three-byte character
    screen = parse(data[:cut] + b"\xff" + data[cut + 1 :])
    assert sum(1 for o in screen.objects if "\ufffd" in o.text) == 1
    assert any(w.startswith("bytes invalid in utf-8 replaced by U+FFFD") for w in screen.warnings)
