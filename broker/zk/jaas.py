"""ZooKeeper credentials the way Kafka finds them: the `Client` section of the JAAS file.

Kafka's brokers and tools are JVMs: `kafka-run-class.sh` passes `$KAFKA_OPTS` to java, an operator
sets `KAFKA_OPTS=-Djava.security.auth.login.config=/etc/kafka/jaas.conf`, and ZooKeeper's client
logs in with that file's `Client` section (another name with `-Dzookeeper.sasl.clientconfig=`;
`-Dzookeeper.sasl.client=false` turns it off). minibroker reads the same variable and the same
file, so one JAAS file and one `export` serve a Kafka cluster and this one alike:

    Client {
      org.apache.zookeeper.server.auth.DigestLoginModule required
      username="kafka"
      password="kafka-secret";
    };

Departure: Kafka authenticates with SASL (DIGEST-MD5 with this module), so ZooKeeper knows it as
`sasl:kafka` and the server needs a SASL authentication provider and its own JAAS section.
minibroker sends the same username and password with ZooKeeper's built-in `digest` scheme
(`addauth digest kafka:kafka-secret`, identity `digest:kafka:<base64 SHA-1>`), which every
ZooKeeper server accepts with no configuration. So the ACLs differ from those Kafka brokers
would write: a tree secured by Kafka brokers is not writable by minibroker, and back.
Only username/password modules are accepted (no Kerberos).

Pure apart from `credentials_from_env`, which reads the file. The password is kept out of
`repr` and of every message here.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

LOGIN_CONFIG_PROPERTY = "java.security.auth.login.config"
CONTEXT_NAME_PROPERTY = "zookeeper.sasl.clientconfig"
SASL_CLIENT_PROPERTY = "zookeeper.sasl.client"
DEFAULT_CONTEXT = "Client"
OPTS_VARIABLE = "KAFKA_OPTS"


class JaasError(ValueError):
    """A JAAS file or KAFKA_OPTS that cannot give ZooKeeper credentials (names no secret)."""


@dataclass(frozen=True)
class ZkCredentials:
    username: str
    password: str = field(repr=False)
    source: str = ""  # where they came from, for messages: "/etc/kafka/jaas.conf [Client]"

    def digest_auth(self) -> bytes:
        """The `digest` scheme's auth data, `user:password`."""
        return f"{self.username}:{self.password}".encode()


@dataclass(frozen=True)
class LoginModule:
    class_name: str
    flag: str
    options: dict[str, str] = field(repr=False)


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


def parse_jaas(text: str) -> dict[str, list[LoginModule]]:
    """A JAAS login configuration file (javax.security.auth.login.ConfigFile's grammar:
    `Name { class flag key=value ...; ... };`, `//` and `/* */` comments, quoted values)."""
    toks = _tokens(text)
    sections: dict[str, list[LoginModule]] = {}
    i = 0

    def expect(kind: str, value: str | None = None) -> str:
        nonlocal i
        if i >= len(toks) or toks[i][0] != kind or (value is not None and toks[i][1] != value):
            raise JaasError(f"expected {value or kind} in the JAAS file (token {i})")
        i += 1
        return toks[i - 1][1]

    while i < len(toks):
        name = expect("word")
        expect("punct", "{")
        modules: list[LoginModule] = []
        while i < len(toks) and toks[i] != ("punct", "}"):
            class_name = expect("word")
            flag = expect("word")
            if flag.lower() not in ("required", "requisite", "sufficient", "optional"):
                raise JaasError(f"section {name}: login module {class_name} has no valid control flag")
            options: dict[str, str] = {}
            while i < len(toks) and toks[i] != ("punct", ";"):
                key = expect("word")
                expect("punct", "=")
                if i >= len(toks) or toks[i][0] not in ("word", "quoted"):
                    raise JaasError(f"section {name}: option {key} has no value")
                options[key] = toks[i][1]
                i += 1
            expect("punct", ";")
            modules.append(LoginModule(class_name, flag.lower(), options))
        expect("punct", "}")
        expect("punct", ";")
        sections[name] = modules
    return sections


def jvm_properties(opts: str) -> dict[str, str]:
    """The `-Dkey=value` system properties in a JVM option string such as `$KAFKA_OPTS`."""
    try:
        words = shlex.split(opts)
    except ValueError as e:
        raise JaasError(f"{OPTS_VARIABLE} cannot be split into words: {e}") from None
    props: dict[str, str] = {}
    for word in words:
        if word.startswith("-D") and len(word) > 2:
            key, _, value = word[2:].partition("=")
            props[key] = value
    return props


def credentials_from_section(modules: list[LoginModule], source: str) -> ZkCredentials:
    for module in modules:
        user, password = module.options.get("username"), module.options.get("password")
        if user is not None and password is not None:
            if ":" in user:
                raise JaasError(f"{source}: a ZooKeeper digest username cannot contain ':'")
            return ZkCredentials(user, password, source)
    raise JaasError(f"{source}: no login module with username and password (minibroker authenticates to "
                    "ZooKeeper with the digest scheme; Kerberos is not supported)")


def credentials_from_env(environ: Mapping[str, str]) -> ZkCredentials | None:
    """The ZooKeeper credentials `$KAFKA_OPTS` leads to, or None when it names no JAAS file or the
    file has no such section (Kafka's JaasUtils.isZkSaslEnabled: then the client is not secure)."""
    props = jvm_properties(environ.get(OPTS_VARIABLE, ""))
    location = props.get(LOGIN_CONFIG_PROPERTY)
    if not location:
        return None
    context = props.get(CONTEXT_NAME_PROPERTY) or DEFAULT_CONTEXT
    try:
        text = Path(location).read_text()
    except OSError as e:
        raise JaasError(f"cannot read the JAAS file {location} ({LOGIN_CONFIG_PROPERTY} in "
                        f"{OPTS_VARIABLE}): {e.strerror}") from None
    try:
        sections = parse_jaas(text)
    except JaasError as e:
        raise JaasError(f"{location}: {e}") from None
    modules = sections.get(context)
    if modules is None:
        return None
    if props.get(SASL_CLIENT_PROPERTY, "true").lower() != "true":
        # Kafka refuses the same contradiction rather than guess.
        raise JaasError(f"{location} has a {context} section but {SASL_CLIENT_PROPERTY} is false")
    return credentials_from_section(modules, f"{location} [{context}]")
