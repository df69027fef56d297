"""ssl.principal.mapping.rules (Kafka 2.8's SslPrincipalMapper, cases from its tests) and the
RFC 2253 subject read from a certificate's DER."""

from __future__ import annotations

import pytest
import trustme
from cryptography import x509
from cryptography.hazmat.primitives.serialization import Encoding

from broker.security.ssl_principal import NoMatchingRule, map_name, parse_rules, principal, subject_rfc2253


@pytest.mark.parametrize("rules", [
    "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/",
    "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/L, DEFAULT",
    "RULE:^CN=(.*?),OU=(.*?),O=(.*?),L=(.*?),ST=(.*?),C=(.*?)$/$1@$2/",
    "RULE:^.*[Cc][Nn]=([a-zA-Z0-9.]*).*$/$1/L",
    "RULE:^cn=(.?),ou=(.?),dc=(.?),dc=(.?)$/$1@$2/U",
    "RULE:^CN=([^,ADEFLTU,]+)(,.*|$)/$1/",
    "  RULE:([A-Z]*)/$1/U   ,RULE:([a-z]+)/$1/,   DEFAULT  ",
    ",,RULE://,,,DEFAULT,,",
])
def test_valid_rules(rules: str) -> None:
    assert parse_rules(rules)


@pytest.mark.parametrize("rules", [
    "default",
    "RULE:CN=(.*?),OU=ServiceUsers.*/$1",
    "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/L/U",
    "RULE:^CN=(.*?),OU=ServiceUsers.*$/L",
    "RULE:^CN=(.*?),OU=ServiceUsers.*$/LU",
])
def test_invalid_rules(rules: str) -> None:
    with pytest.raises(ValueError):
        parse_rules(rules)


def test_kafkas_mapping_examples() -> None:
    rules = parse_rules(",".join([
        "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/L",
        "RULE:^CN=(.*?),OU=(.*?),O=(.*?),L=(.*?),ST=(.*?),C=(.*?)$/$1@$2/L",
        "RULE:^cn=(.*?),ou=(.*?),dc=(.*?),dc=(.*?)$/$1@$2/U",
        "RULE:^.*[Cc][Nn]=([a-zA-Z0-9.]*).*$/$1/U",
        "DEFAULT"]))
    assert map_name(rules, "CN=Duke,OU=ServiceUsers,O=Org,C=US") == "duke"
    assert map_name(rules, "CN=Duke,OU=SME,O=mycp,L=Fulton,ST=MD,C=US") == "duke@sme"
    assert map_name(rules, "cn=duke,ou=sme,dc=mycp,dc=com") == "DUKE@SME"
    assert map_name(rules, "cN=duke,OU=JavaSoft,O=Sun Microsystems") == "DUKE"
    assert map_name(rules, "OU=JavaSoft,O=Sun Microsystems,C=US") == "OU=JavaSoft,O=Sun Microsystems,C=US"
    escaped = parse_rules("RULE:^CN=((\\\\, *|\\w)+)(,.*|$)/$1/,DEFAULT")
    assert map_name(escaped, "CN=Tkac\\, Adam,OU=ITZ,DC=geodis,DC=cz") == "Tkac\\, Adam"
    with pytest.raises(NoMatchingRule):
        map_name(parse_rules("RULE:^CN=(.*)$/$1/"), "OU=nobody")


def test_subject_in_rfc2253_form_and_principal() -> None:
    ca = trustme.CA()
    cert = ca.issue_cert("a.example.com", common_name="Smith, John+x", organization_name="Org",
                         organization_unit_name="Unit")
    pem = cert.cert_chain_pems[0].bytes()
    der = x509.load_pem_x509_certificate(pem).public_bytes(Encoding.DER)
    expected = x509.load_pem_x509_certificate(pem).subject.rfc4514_string()
    assert subject_rfc2253(der) == expected == "CN=Smith\\, John\\+x,OU=Unit,O=Org"
    assert principal(parse_rules("DEFAULT"), der) == "User:" + expected
    assert principal(parse_rules("RULE:^CN=([^,\\\\]+).*$/$1/L"), der) == "User:smith"
    assert principal(parse_rules("DEFAULT"), None) == "User:ANONYMOUS"
