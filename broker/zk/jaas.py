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

import shlex
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

# JaasError is re-exported: the broker's tools and config catch it from here.
from fetcher.jaas import JaasError as JaasError
from fetcher.jaas import LoginModule, parse_jaas_file

LOGIN_CONFIG_PROPERTY = "java.security.auth.login.config"
CONTEXT_NAME_PROPERTY = "zookeeper.sasl.clientconfig"
SASL_CLIENT_PROPERTY = "zookeeper.sasl.client"
DEFAULT_CONTEXT = "Client"
OPTS_VARIABLE = "KAFKA_OPTS"


@dataclass(frozen=True)
class ZkCredentials:
    username: str
    password: str = field(repr=False)
    source: str = ""  # where they came from, for messages: "/etc/kafka/jaas.conf [Client]"

    def digest_auth(self) -> bytes:
        """The `digest` scheme's auth data, `user:password`."""
        return f"{self.username}:{self.password}".encode()


def parse_jaas(text: str) -> dict[str, list[LoginModule]]:
    """A JAAS login configuration file (fetcher.jaas: javax.security.auth.login.ConfigFile's grammar)."""
    try:
        return parse_jaas_file(text)
    except JaasError as e:
        raise JaasError(f"{e} in the JAAS file") from None


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
