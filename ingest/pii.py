"""PII redaction for every free-text field (thoughts, typed text, instruction, metadata) and annotator pseudonyms.

Why regexes plus checks rather than a model: the patterns that leak in GUI sessions (e-mails, phones, card
numbers, IPs, credentials in URLs) have precise shapes; Luhn and octet checks keep numbers such as "1680 x 1050"
or "78" from being destroyed.
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import re
from typing import Any

URL_CREDS = re.compile(r"\b([a-z][a-z0-9+.-]*://)[^\s/@:]+:[^\s/@]*@", re.I)
EMAIL = re.compile(r"[A-Za-z0-9._%+-]+@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)*\.[A-Za-z]{2,}")
CARD = re.compile(r"(?<![\d-])(?:\d[ -]?){12,18}\d(?![\d-])")
IPV4 = re.compile(r"(?<![\d.])(?:\d{1,3}\.){3}\d{1,3}(?![\d.])")
IPV6 = re.compile(r"(?<![\w:])(?:[0-9a-f]{0,4}:){2,7}[0-9a-f]{0,4}(?![\w:])", re.I)
PHONE = re.compile(
    r"(?<![\w+])(?:\+\d{1,3}[\s.-]?(?:\(?\d{1,4}\)?[\s.-]?){2,4}\d{2,4}"  # +44 20 7946 0958, +1-202-555-0173
    r"|\(\d{3}\)\s?\d{3}[\s.-]\d{4}|\d{3}[.-]\d{3}[.-]\d{4})(?!\w)"  # (202) 555-0173, 202-555-0173
)


def luhn_ok(digits: str) -> bool:
    total, alt = 0, False
    for ch in reversed(digits):
        d = int(ch)
        if alt:
            d = d * 2 - 9 if d > 4 else d * 2
        total += d
        alt = not alt
    return total % 10 == 0


def _card(m: re.Match[str]) -> str:
    digits = re.sub(r"\D", "", m.group(0))
    return "[CARD]" if 13 <= len(digits) <= 19 and luhn_ok(digits) else m.group(0)


def _ipv4(m: re.Match[str]) -> str:
    return "[IP]" if all(int(p) <= 255 for p in m.group(0).split(".")) else m.group(0)


def _ipv6(m: re.Match[str]) -> str:
    try:
        ipaddress.IPv6Address(m.group(0))
    except ValueError:
        return m.group(0)
    return "[IP]"


def _phone(m: re.Match[str]) -> str:
    return "[PHONE]" if len(re.sub(r"\D", "", m.group(0))) >= 9 else m.group(0)


def redact(text: str | None) -> str | None:
    """The text with PII replaced by [EMAIL], [PHONE], [CARD], [IP] and [CREDENTIALS] placeholders."""
    if not text:
        return text
    out = URL_CREDS.sub(lambda m: f"{m.group(1)}[CREDENTIALS]@", text)
    out = EMAIL.sub("[EMAIL]", out)
    out = CARD.sub(_card, out)
    out = IPV4.sub(_ipv4, out)
    out = IPV6.sub(_ipv6, out)
    out = PHONE.sub(_phone, out)
    return out


def redact_obj(obj: Any) -> Any:
    """Redact every string inside a JSON-like value (dict keys too: recorders put e-mails in folder names)."""
    if isinstance(obj, str):
        return redact(obj)
    if isinstance(obj, dict):
        return {redact(str(k)): redact_obj(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [redact_obj(v) for v in obj]
    return obj


def pseudonym(annotator_id: str | None, salt: str | None = None) -> str | None:
    """A stable salted pseudonym (HMAC-SHA256) for an annotator id; the raw id never lands."""
    if not annotator_id:
        return None
    if salt is None:
        from core.settings import get_settings

        salt = get_settings().pseudonym_salt.get_secret_value()
    return "anon-" + hmac.new(salt.encode(), annotator_id.strip().lower().encode(), hashlib.sha256).hexdigest()[:16]
