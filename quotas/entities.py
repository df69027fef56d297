"""KIP-55's quota entities: which of the eight (plus static) levels bounds a request, and its sensor.

One `QuotaEntities` per quota type (produce, fetch, controller mutation) holds the dynamic
quotas of that type, keyed by entity `(user, client_id)`: the user is Kafka's sanitized
(znode) form or `<default>`, the client id the plain id or `<default>`, and None leaves that
part out (`/config/users/<user>` is `(user, None)`, `/config/clients/<id>` is `(None, id)`).

A request is metered under tags `(user, client_id)` (Kafka 2.8's DefaultQuotaCallback
`quotaMetricTags`): the first level that exists, highest first,

    1 /config/users/<user>/clients/<client-id>      -> (user, client-id)
    2 /config/users/<user>/clients/<default>        -> (user, client-id)
    3 /config/users/<user>                          -> (user, "")
    4 /config/users/<default>/clients/<client-id>   -> (user, client-id)
    5 /config/users/<default>/clients/<default>     -> (user, client-id)
    6 /config/users/<default>                       -> (user, "")
    7 /config/clients/<client-id>                   -> ("", client-id)
    8 /config/clients/<default>                     -> ("", client-id)
    9 the static quota (quota.<type>.override, then quota.<type>.default)

so the tags name the request's own user and client id, never `<default>`: users sharing the
`<default>` user quota each get their own sensor (bucket), and one user's clients share one
sensor under a user-level quota. The bound in force for tags is `limit(tags)` (Kafka's
`quotaLimit`): (user, client) looks at levels 1, 2, 4, 5; (user, "") at 3, 6; ("", client)
at 7, 8, 9.

As in Kafka, which kinds of entity were ever configured (client-id, user, user+client-id; a
static default counts as client-id) is remembered until restart and short-cuts the walk
above: with one kind only, the tags are fixed by that kind ((user, "") for user quotas
only, whether or not this user has one). This decides only which sensor an unbounded
request counts under, never a bound.

Sensors idle for an hour are dropped (Kafka's `InactiveSensorExpirationTimeSeconds`). While no
quota of a type was ever configured, Kafka keeps no sensors of that type at all (its
`quotasEnabled` is false); minibroker still measures every client for its metrics, and then
drops a sensor once idle for the whole quota window (`samples * window`), by which time every
value it reports (rate, throttle average) has decayed to 0: a stream of one-off client ids (the
fuzz bench mutates them) keeps only the clients of the last minute or so (`sensor_expiry_ms`).

Departure from Kafka, kept from KIP-13 here: a request with no client id (and no user
level) is bounded by the client-id levels as the client "" (Kafka 2.8's quotaLimit leaves
tags ("", "") unbounded).

Pure: no clock, no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple

DEFAULT = "<default>"
LONG_MAX = (1 << 63) - 1

CLIENT_ID_QUOTAS = 1
USER_QUOTAS = 2
USER_CLIENT_ID_QUOTAS = 4
SENSOR_EXPIRY_MS = 3600 * 1000  # Kafka's quota sensors' inactivity expiry
EXPIRY_SWEEP_MS = 60_000  # how often a manager looks for idle sensors, at most


class Tags(NamedTuple):
    """What a request is metered under: "" for a part the matched level leaves out."""

    user: str
    client_id: str


Entity = tuple[str | None, str | None]


def sensor_tags(sensor: Tags | str) -> Tags:
    """A sensor named by its tags, or by a bare client id (the client-id levels' ("", id))."""
    return Tags("", sensor) if isinstance(sensor, str) else sensor


@dataclass
class QuotaEntities:
    """The dynamic and static quotas of one quota type, and Kafka's resolution over them."""

    static_default: float = LONG_MAX
    static_overrides: dict[str, float] = field(default_factory=dict)
    quotas: dict[Entity, float] = field(default_factory=dict)
    kinds: int = 0  # which entity kinds were ever configured (sticky, as Kafka's quotaTypesEnabled)

    def __post_init__(self) -> None:
        if self.static_default < LONG_MAX or self.static_overrides:
            self.kinds |= CLIENT_ID_QUOTAS

    def set(self, user: str | None, client_id: str | None, bound: float | None) -> None:
        """A dynamic quota for one entity; None removes it."""
        if user is not None:
            self.kinds |= USER_CLIENT_ID_QUOTAS if client_id is not None else USER_QUOTAS
        elif client_id is not None:
            self.kinds |= CLIENT_ID_QUOTAS
        else:
            raise ValueError("a quota entity names a user, a client id or both")
        if bound is None:
            self.quotas.pop((user, client_id), None)
        else:
            self.quotas[(user, client_id)] = bound

    def sensor_expiry_ms(self, quota_window_ms: float) -> float:
        """How long a sensor may sit idle before it is dropped: Kafka's hour once any quota of this
        type was configured, else the quota window (see the module docstring)."""
        return SENSOR_EXPIRY_MS if self.kinds else quota_window_ms

    def tags(self, user: str, client_id: str) -> Tags:
        """The sensor a request of this (sanitized) user and client id is metered under."""
        kinds = self.kinds
        if kinds in (0, CLIENT_ID_QUOTAS):
            return Tags("", client_id)
        if kinds == USER_QUOTAS:
            return Tags(user, "")
        if kinds == USER_CLIENT_ID_QUOTAS:
            return Tags(user, client_id)
        q = self.quotas
        if (user, client_id) in q or (user, DEFAULT) in q:
            return Tags(user, client_id)
        if (user, None) in q:
            return Tags(user, "")
        if (DEFAULT, client_id) in q or (DEFAULT, DEFAULT) in q:
            return Tags(user, client_id)
        if (DEFAULT, None) in q:
            return Tags(user, "")
        return Tags("", client_id)

    def limit(self, tags: Tags) -> float | None:
        """The bound for a sensor's tags (B/s or partitions/s); None when unlimited."""
        user, client_id = tags
        q = self.quotas
        bound: float | None
        if user and client_id:
            bound = q.get((user, client_id))
            if bound is None:
                bound = q.get((user, DEFAULT))
            if bound is None:
                bound = q.get((DEFAULT, client_id))
            if bound is None:
                bound = q.get((DEFAULT, DEFAULT))
        elif user:
            bound = q.get((user, None))
            if bound is None:
                bound = q.get((DEFAULT, None))
        else:
            bound = q.get((None, client_id))
            if bound is None:
                bound = q.get((None, DEFAULT))
            if bound is None:
                bound = self.static_overrides.get(client_id, self.static_default)
        return None if bound is None or bound >= LONG_MAX else bound

    def resolve(self, user: str, client_id: str) -> tuple[Tags, float | None]:
        """Both at once: the request's sensor tags and the bound in force for them."""
        tags = self.tags(user, client_id)
        return tags, self.limit(tags)
