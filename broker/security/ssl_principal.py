"""The principal of a TLS client: its certificate's subject in RFC 2253 form, mapped by
`ssl.principal.mapping.rules` (Kafka 2.8's DefaultKafkaPrincipalBuilder and SslPrincipalMapper).

Pure: the subject is read from the certificate's DER bytes (Python's `ssl` gives only decoded
attribute names, not the DER values RFC 2253 needs for unknown attribute types). Departure: the
string escaping is RFC 2253's, which is what Java's `X500Principal.getName()` writes for the
attribute values certificates carry in practice (printable strings, UTF-8).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

ANONYMOUS_NAME = "ANONYMOUS"

# RFC 2253's keywords (what Java's X500Principal.RFC2253 writes); other types are dotted OIDs.
_KEYWORDS = {
    "2.5.4.3": "CN", "2.5.4.6": "C", "2.5.4.7": "L", "2.5.4.8": "ST", "2.5.4.9": "STREET",
    "2.5.4.10": "O", "2.5.4.11": "OU", "0.9.2342.19200300.100.1.25": "DC", "0.9.2342.19200300.100.1.1": "UID",
}
# Universal string types decoded to text; any other value is written as #hex of its DER.
_STRING_TAGS = {0x0C: "utf-8", 0x13: "ascii", 0x16: "ascii", 0x14: "latin-1", 0x1E: "utf-16-be",
                0x1C: "utf-32-be"}


class CertificateError(ValueError):
    pass


def _tlv(der: bytes, pos: int) -> tuple[int, int, int]:
    """(tag, start of content, end of content) of the DER element at `pos`."""
    if pos + 2 > len(der):
        raise CertificateError("truncated DER")
    tag, first = der[pos], der[pos + 1]
    pos += 2
    if first < 0x80:
        length = first
    else:
        n = first & 0x7F
        if n == 0 or n > 4 or pos + n > len(der):
            raise CertificateError("bad DER length")
        length = int.from_bytes(der[pos:pos + n], "big")
        pos += n
    if pos + length > len(der):
        raise CertificateError("truncated DER")
    return tag, pos, pos + length


def _children(der: bytes, start: int, end: int) -> list[tuple[int, int, int, int]]:
    """(tag, content start, content end, element start) of each element in [start, end)."""
    out = []
    while start < end:
        tag, cs, ce = _tlv(der, start)
        out.append((tag, cs, ce, start))
        start = ce
    return out


def _oid(body: bytes) -> str:
    if not body:
        raise CertificateError("empty OID")
    parts = [min(body[0] // 40, 2)]
    parts.append(body[0] - parts[0] * 40)
    value = 0
    for b in body[1:]:
        value = (value << 7) | (b & 0x7F)
        if not b & 0x80:
            parts.append(value)
            value = 0
    return ".".join(map(str, parts))


def _escape(value: str) -> str:
    out = re.sub(r'([,+"\\<>;])', r"\\\1", value)
    if out.startswith(("#", " ")):
        out = "\\" + out
    if out.endswith(" ") and not out.endswith("\\ "):
        out = out[:-1] + "\\ "
    return out


def subject_rfc2253(der: bytes) -> str:
    """The subject distinguished name of a DER certificate, RFC 2253 form (last RDN first)."""
    _, cs, ce = _tlv(der, 0)                      # Certificate
    tbs_tag, ts, te = _tlv(der, cs)               # TBSCertificate
    fields = _children(der, ts, te)
    if fields and fields[0][0] == 0xA0:           # [0] version
        fields = fields[1:]
    if len(fields) < 5:
        raise CertificateError("not an X.509 certificate")
    _, ns, ne, _ = fields[4]                      # serial, signature, issuer, validity, subject
    rdns = []
    for _, rs, re_, _ in _children(der, ns, ne):  # SET OF AttributeTypeAndValue
        avas = []
        for _, as_, ae, _ in _children(der, rs, re_):
            (ot, os_, oe, _), (vt, vs, ve, vstart) = _children(der, as_, ae)[:2]
            oid = _oid(der[os_:oe])
            keyword = _KEYWORDS.get(oid)
            encoding = _STRING_TAGS.get(vt)
            if keyword is not None and encoding is not None:
                avas.append(f"{keyword}={_escape(der[vs:ve].decode(encoding, 'replace'))}")
            else:
                avas.append(f"{keyword or oid}=#{der[vstart:ve].hex()}")
        rdns.append("+".join(avas))
    return ",".join(reversed(rdns))


# Kafka's SslPrincipalMapper grammar: DEFAULT, or RULE:pattern/replacement/[LU].
_RULE = r"(DEFAULT)|RULE:((?:\\.|[^\\/])*)/((?:\\.|[^\\/])*)/([LU]?).*?|(.*?)"
_SPLITTER = re.compile(r"\s*(" + _RULE + r")\s*(,\s*|$)")
_PARSER = re.compile(_RULE)
_BACKREF = re.compile(r"\$(\d+)")


@dataclass(frozen=True)
class Rule:
    pattern: re.Pattern[str] | None  # None: DEFAULT
    replacement: str = ""
    lower: bool = False
    upper: bool = False

    def apply(self, dn: str) -> str | None:
        if self.pattern is None:
            return dn
        if self.pattern.fullmatch(dn) is None:
            return None
        result = self.pattern.sub(_python_replacement(self.replacement, self.pattern.groups), dn)
        return result.lower() if self.lower else result.upper() if self.upper else result


def _python_replacement(java: str, groups: int) -> str:
    """A Java replaceAll replacement (`$1`, `\\x` literal) as a Python re.sub template; a back
    reference above the group count loses digits as in Kafka's rule (`$12` with 1 group is `$1`
    then `2`), and one with no group left is literal."""
    out: list[str] = []
    i = 0
    while i < len(java):
        ch = java[i]
        if ch == "\\" and i + 1 < len(java):
            out.append(java[i + 1].replace("\\", "\\\\"))
            i += 2
            continue
        m = _BACKREF.match(java, i)
        if m:
            digits = m.group(1)
            n = len(digits)
            while n > 1 and int(digits[:n]) > groups:
                n -= 1
            ref = int(digits[:n])
            if ref <= groups:
                out.append(f"\\g<{ref}>" + digits[n:])
            else:
                out.append("$" + digits)
            i = m.end()
            continue
        out.append("\\\\" if ch == "\\" else ch)
        i += 1
    return "".join(out)


def parse_rules(raw: str) -> tuple[Rule, ...]:
    """`ssl.principal.mapping.rules`; ValueError naming the rule that does not parse."""
    rules = []
    for m in _SPLITTER.finditer(raw.strip()):
        text = m.group(1)
        if text is None:
            continue
        pm = _PARSER.match(text)
        if pm is None or pm.end() != len(text):
            raise ValueError(f"invalid rule: {text}")
        if pm.group(1) is not None:
            rules.append(Rule(None))
        elif pm.group(2) is not None:
            try:
                pattern = re.compile(pm.group(2))
            except re.error as e:
                raise ValueError(f"invalid rule: {text} ({e})") from None
            rules.append(Rule(pattern, pm.group(3), pm.group(4) == "L", pm.group(4) == "U"))
        elif pm.group(5):
            raise ValueError(f"invalid rule: {text}")
        if m.end() == len(raw.strip()):
            break
    return tuple(rules)


class NoMatchingRule(ValueError):
    pass


def map_name(rules: tuple[Rule, ...], dn: str) -> str:
    """The first rule that applies (SslPrincipalMapper.getName); NoMatchingRule when none does."""
    for rule in rules:
        name = rule.apply(dn)
        if name is not None:
            return name
    raise NoMatchingRule(f"no ssl.principal.mapping.rules rule applies to {dn}")


def principal(rules: tuple[Rule, ...], peer_der: bytes | None) -> str:
    """`User:<mapped subject>`, or User:ANONYMOUS without a client certificate."""
    if not peer_der:
        return f"User:{ANONYMOUS_NAME}"
    return "User:" + map_name(rules, subject_rfc2253(peer_der))
