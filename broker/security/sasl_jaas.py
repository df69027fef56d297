"""`sasl.jaas.config` values, read as Kafka's JaasConfig reads them: one login module entry.

`org.apache.kafka.common.security.plain.PlainLoginModule required username="admin" password="s" user_admin="s";`
A login module class, a control flag (required, requisite, sufficient, optional), options
`key=value` (value quoted or a bare word) and a closing `;`. As Kafka's `sasl.jaas.config`, exactly
one entry. What the broker reads from it (Kafka's PlainLoginModule / ScramLoginModule): PLAIN's
users as `user_<name>="<password>"`, and `username`/`password`, which the broker uses as its
own client credentials on the inter-broker listener. Errors never repeat the text (it holds
passwords). Pure.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

PLAIN_MODULE = "org.apache.kafka.common.security.plain.PlainLoginModule"
SCRAM_MODULE = "org.apache.kafka.common.security.scram.ScramLoginModule"
FLAGS = frozenset({"required", "requisite", "sufficient", "optional"})
USER_PREFIX = "user_"

_TOKEN = re.compile(r'\s*(?:"((?:[^"\\]|\\.)*)"|([^\s=;"]+)|(=)|(;))', re.DOTALL)


class JaasError(ValueError):
    pass


@dataclass(frozen=True)
class JaasEntry:
    login_module: str
    flag: str
    options: dict[str, str] = field(default_factory=dict, repr=False)  # passwords: never in a repr

    @property
    def users(self) -> dict[str, str]:
        """PlainLoginModule's `user_<name>` options: name → password."""
        return {k[len(USER_PREFIX):]: v for k, v in self.options.items() if k.startswith(USER_PREFIX)}

    @property
    def client_credentials(self) -> tuple[str, str] | None:
        """`username`/`password`: what the broker itself logs in with (inter-broker)."""
        user, password = self.options.get("username"), self.options.get("password")
        return (user, password) if user is not None and password is not None else None


def _tokens(text: str) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    pos = 0
    text = text.rstrip()
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if m is None or m.end() == pos:
            raise JaasError(f"unexpected character at position {pos}")
        quoted, word, eq, semi = m.groups()
        if quoted is not None:
            out.append(("value", re.sub(r"\\(.)", r"\1", quoted)))
        elif word is not None:
            out.append(("word", word))
        elif eq is not None:
            out.append(("=", "="))
        elif semi is not None:
            out.append((";", ";"))
        pos = m.end()
    return out


def parse_jaas_config(text: str) -> JaasEntry:
    """The one login module entry of a `sasl.jaas.config` value; JaasError otherwise."""
    tokens = _tokens(text)
    entries: list[JaasEntry] = []
    i = 0
    while i < len(tokens):
        if tokens[i][0] != "word":
            raise JaasError("expected a login module class name")
        module = tokens[i][1]
        if i + 1 >= len(tokens) or tokens[i + 1][0] != "word" or tokens[i + 1][1].lower() not in FLAGS:
            raise JaasError(f"login module {module}: expected a control flag (required, requisite, sufficient, optional)")
        flag = tokens[i + 1][1].lower()
        i += 2
        options: dict[str, str] = {}
        while i < len(tokens) and tokens[i][0] != ";":
            if (i + 2 >= len(tokens) or tokens[i][0] != "word" or tokens[i + 1][0] != "="
                    or tokens[i + 2][0] not in ("value", "word")):
                raise JaasError(f"login module {module}: expected option=value")
            options[tokens[i][1]] = tokens[i + 2][1]
            i += 3
        if i >= len(tokens):
            raise JaasError(f"login module {module}: the entry must end with ';'")
        i += 1
        entries.append(JaasEntry(module, flag, options))
    if len(entries) != 1:
        raise JaasError(f"JAAS config property contains {len(entries)} login modules, should be 1 module")
    return entries[0]
