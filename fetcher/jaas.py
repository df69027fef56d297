"""JAAS login configuration, read as the JVM's ConfigFile and Kafka's JaasConfig read it. Pure.

One grammar serves three readers: a client's `sasl.jaas.config` (fetcher.security), a SASL
listener's `sasl.jaas.config` (broker.security.sasl_jaas: PLAIN's users, the broker's own
login) and the JAAS file whose `Client` section holds ZooKeeper credentials (broker.zk.jaas).

    Name { class flag key=value ...; ... };      a file: sections of login module entries
    class flag key=value ...;                    a `sasl.jaas.config` value: exactly one entry

Control flags: required, requisite, sufficient, optional. Values quoted (backslash escapes) or
bare words; `//` and `/* */` comments. Errors never repeat the text (it holds passwords), and
`LoginModule` keeps its options out of `repr`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

FLAGS = frozenset({"required", "requisite", "sufficient", "optional"})
USER_PREFIX = "user_"


class JaasError(ValueError):
    """Text that is not a JAAS configuration (the message names no option value)."""


@dataclass(frozen=True)
class LoginModule:
    class_name: str
    flag: str
    options: dict[str, str] = field(default_factory=dict, repr=False)  # passwords: never in a repr

    @property
    def users(self) -> dict[str, str]:
        """PlainLoginModule's `user_<name>` options: name → password."""
        return {k[len(USER_PREFIX):]: v for k, v in self.options.items() if k.startswith(USER_PREFIX)}

    @property
    def client_credentials(self) -> tuple[str, str] | None:
        """`username`/`password`: what this side logs in with."""
        user, password = self.options.get("username"), self.options.get("password")
        return (user, password) if user is not None and password is not None else None


_TOKEN = re.compile(r"""
    (?P<space>\s+) | (?P<comment>//[^\n]*|/\*.*?\*/) | (?P<quoted>"(?:[^"\\]|\\.)*") |
    (?P<punct>[{};=]) | (?P<word>[^\s{};="]+)
""", re.VERBOSE | re.DOTALL)


def _tokens(text: str) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    pos = 0
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if m is None:
            raise JaasError(f"unexpected character at offset {pos}")
        pos = m.end()
        kind = m.lastgroup or ""
        if kind in ("space", "comment"):
            continue
        value = m.group(0)
        if kind == "quoted":
            value = re.sub(r"\\(.)", r"\1", value[1:-1])
        out.append((kind, value))
    return out


class _Reader:
    def __init__(self, text: str) -> None:
        self.toks = _tokens(text)
        self.i = 0

    def more(self) -> bool:
        return self.i < len(self.toks)

    def at(self, kind: str, value: str) -> bool:
        return self.more() and self.toks[self.i] == (kind, value)

    def expect(self, kind: str, value: str | None = None, what: str = "") -> str:
        if not self.more() or self.toks[self.i][0] != kind or (value is not None and self.toks[self.i][1] != value):
            raise JaasError(f"expected {what or value or kind} (token {self.i})")
        self.i += 1
        return self.toks[self.i - 1][1]

    def entry(self) -> LoginModule:
        """`class flag key=value ... ;`"""
        class_name = self.expect("word", what="a login module class name")
        flag = self.expect("word", what=f"a control flag after {class_name}").lower()
        if flag not in FLAGS:
            raise JaasError(f"login module {class_name}: expected a control flag (required, requisite, "
                            "sufficient, optional)")
        options: dict[str, str] = {}
        while self.more() and not self.at("punct", ";"):
            key = self.expect("word", what=f"an option of {class_name}")
            self.expect("punct", "=", what=f"'=' after option {key} of {class_name}")
            if not self.more() or self.toks[self.i][0] not in ("word", "quoted"):
                raise JaasError(f"login module {class_name}: option {key} has no value")
            options[key] = self.toks[self.i][1]
            self.i += 1
        self.expect("punct", ";", what=f"';' ending the entry of {class_name}")
        return LoginModule(class_name, flag, options)


def parse_jaas_file(text: str) -> dict[str, list[LoginModule]]:
    """A JAAS login configuration file: its sections by name."""
    r = _Reader(text)
    sections: dict[str, list[LoginModule]] = {}
    while r.more():
        name = r.expect("word", what="a section name")
        r.expect("punct", "{")
        modules: list[LoginModule] = []
        while r.more() and not r.at("punct", "}"):
            modules.append(r.entry())
        r.expect("punct", "}")
        r.expect("punct", ";")
        sections[name] = modules
    return sections


def parse_jaas_config(text: str) -> LoginModule:
    """The one login module entry of a `sasl.jaas.config` value (Kafka's JaasConfig)."""
    r = _Reader(text)
    entries: list[LoginModule] = []
    while r.more():
        entries.append(r.entry())
    if len(entries) != 1:
        raise JaasError(f"JAAS config property contains {len(entries)} login modules, should be 1 module")
    return entries[0]
