"""A client certificate's subject as Java's X500Principal.getName() (RFC 2253) writes it.

Kafka's DEFAULT ssl.principal.mapping.rules make that string the principal name, so it has to be
byte-for-byte Java's: RDNs last-to-first, Java's keyword set (CN, C, L, ST, O, OU, STREET, DC,
UID), any other attribute as `<dotted OID>=#<hex of its DER encoding>`, RFC 2253 escaping.
Python's ssl module decodes subjects into a dict that loses the DER of unknown attributes, so
the subject is read from the certificate's DER with the small reader below.
"""

from __future__ import annotations

# Java's RFC 2253 keywords; every other attribute is written as an OID with a hex value.
_KEYWORDS = {
    "2.5.4.3": "CN", "2.5.4.6": "C", "2.5.4.7": "L", "2.5.4.8": "ST", "2.5.4.10": "O",
    "2.5.4.11": "OU", "2.5.4.9": "STREET", "0.9.2342.19200300.100.1.25": "DC",
    "0.9.2342.19200300.100.1.1": "UID",
}
# ASN.1 string types Java renders as text: UTF8, Printable, Teletex, IA5, Universal, BMP.
_STRING_TAGS = {0x0C: "utf-8", 0x13: "latin-1", 0x14: "latin-1", 0x16: "latin-1", 0x1C: "utf-32-be",
                0x1E: "utf-16-be"}


class CertificateError(ValueError):
    """The DER is not a certificate this reader understands."""


def _read_tlv(data: bytes, pos: int) -> tuple[int, int, int, int]:
    """(tag, start of value, end of value, end of TLV) of the element at `pos`."""
    if pos + 2 > len(data):
        raise CertificateError("truncated DER")
    tag = data[pos]
    length = data[pos + 1]
    pos += 2
    if length & 0x80:
        n = length & 0x7F
        if n == 0 or n > 4 or pos + n > len(data):
            raise CertificateError("bad DER length")
        length = int.from_bytes(data[pos : pos + n], "big")
        pos += n
    end = pos + length
    if end > len(data):
        raise CertificateError("truncated DER")
    return tag, pos, end, end


def _children(data: bytes, start: int, end: int) -> list[tuple[int, int, int, int]]:
    """(tag, value start, value end, tlv start) of each element inside a constructed value."""
    out = []
    pos = start
    while pos < end:
        tag, vs, ve, nxt = _read_tlv(data, pos)
        out.append((tag, vs, ve, pos))
        pos = nxt
    return out


def _oid(raw: bytes) -> str:
    if not raw:
        raise CertificateError("empty OID")
    first = raw[0]
    parts = [str(min(first // 40, 2)), str(first - 40 * min(first // 40, 2))]
    value = 0
    for b in raw[1:]:
        value = (value << 7) | (b & 0x7F)
        if not b & 0x80:
            parts.append(str(value))
            value = 0
    return ".".join(parts)


def _escape(value: str) -> str:
    out = []
    for i, ch in enumerate(value):
        if ch in ',+"\\<>;' or (ch == "#" and i == 0) or (ch == " " and (i == 0 or i == len(value) - 1)):
            out.append("\\" + ch)
        else:
            out.append(ch)
    return "".join(out)


def subject_rfc2253(cert_der: bytes) -> str:
    """The subject DN of a DER certificate in Java's RFC 2253 form."""
    _, cs, ce, _ = _read_tlv(cert_der, 0)
    tbs_tag, ts, te, _ = _children(cert_der, cs, ce)[0]
    fields = _children(cert_der, ts, te)
    if fields and fields[0][0] == 0xA0:  # [0] EXPLICIT version
        fields = fields[1:]
    # serialNumber, signature, issuer, validity, subject
    if len(fields) < 5 or fields[4][0] != 0x30:
        raise CertificateError("certificate has no subject")
    _, ns, ne, _ = fields[4]
    rdns = []
    for _tag, rs, re_, _ in _children(cert_der, ns, ne):
        avas = []
        for _t, as_, ae, _ in _children(cert_der, rs, re_):
            (otag, os_, oe, _), (vtag, vs, ve, vstart) = _children(cert_der, as_, ae)[:2]
            if otag != 0x06:
                raise CertificateError("attribute without an OID")
            oid = _oid(cert_der[os_:oe])
            keyword = _KEYWORDS.get(oid)
            if keyword is not None and vtag in _STRING_TAGS:
                text = cert_der[vs:ve].decode(_STRING_TAGS[vtag], errors="replace")
                avas.append(f"{keyword}={_escape(text)}")
            else:
                avas.append(f"{oid}=#{cert_der[vstart:ve].hex()}")
        rdns.append("+".join(avas))
    return ",".join(reversed(rdns))
