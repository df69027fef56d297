"""Broker properties from the environment, with the Kafka images' convention.

`KAFKA_` prefix, upper case, and runs of underscores encoding the punctuation of the key:
`_` → `.`, `__` → `_`, `___` → `-` (`KAFKA_ZOOKEEPER_CONNECT` → `zookeeper.connect`,
`KAFKA_LISTENER_SECURITY_PROTOCOL_MAP` → `listener.security.protocol.map`). Pure: the caller
passes the environment. Variables that Kafka's images reserve for the JVM and log4j are not
properties and are skipped, as those images skip them.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

PREFIX = "KAFKA_"

# Read by Kafka's start scripts, never turned into properties by its images.
NOT_PROPERTIES = frozenset({
    "KAFKA_HEAP_OPTS", "KAFKA_OPTS", "KAFKA_JMX_OPTS", "KAFKA_JVM_PERFORMANCE_OPTS", "KAFKA_GC_LOG_OPTS",
    "KAFKA_LOG4J_OPTS", "KAFKA_LOG4J_ROOT_LOGLEVEL", "KAFKA_LOG4J_LOGGERS", "KAFKA_TOOLS_LOG4J_LOGLEVEL",
    "KAFKA_VERSION", "KAFKA_DEBUG", "KAFKA_HOME",
})

_UNDERSCORES = re.compile(r"_+")
_RUN = {1: ".", 2: "_", 3: "-"}


def property_name(env_name: str) -> str | None:
    """The property a `KAFKA_*` variable sets, or None if the variable is not one."""
    if not env_name.startswith(PREFIX) or env_name in NOT_PROPERTIES or len(env_name) == len(PREFIX):
        return None
    raw = env_name[len(PREFIX):].lower()

    def punctuation(m: re.Match[str]) -> str:
        n = len(m.group(0))
        # A longer run is read left to right in threes: `____` is `-.`.
        return "-" * (n // 3) + ("" if n % 3 == 0 else _RUN[n % 3])

    return _UNDERSCORES.sub(punctuation, raw)


def properties_from_env(environ: Mapping[str, str]) -> dict[str, tuple[str, str]]:
    """property → (value, the variable it came from), for every `KAFKA_*` variable."""
    out: dict[str, tuple[str, str]] = {}
    for name in sorted(environ):
        key = property_name(name)
        if key:
            out[key] = (environ[name], name)
    return out
