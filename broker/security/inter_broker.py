"""How this broker connects to the others: replica fetchers, the controller channel and
controlled shutdown all reach the other brokers' `inter.broker.listener.name` endpoint (the one
`BrokerInfo.decode` picks from their registrations), with this ClientSecurity.

SSL / SASL_SSL: the broker's own PEM key on that listener is its client certificate, its
truststore checks the other broker's certificate (the listener's
ssl.endpoint.identification.algorithm decides the host-name check, Kafka's default https).
"""

from __future__ import annotations

import dataclasses

from broker.security.sasl_listeners import inter_broker_sasl
from broker.security.ssl_listener import inter_broker_client
from broker.security.ssl_settings import ListenerSettings, listener_ssl_settings
from fetcher.security import ClientSecurity

TLS_PROTOCOLS = ("SSL", "SASL_SSL")
SASL_PROTOCOLS = ("SASL_PLAINTEXT", "SASL_SSL")


def inter_broker_security(cfg: ListenerSettings, listener: str, security_protocol: str) -> ClientSecurity:
    security = ClientSecurity(security_protocol=security_protocol)
    if security_protocol in TLS_PROTOCOLS:
        security = inter_broker_client(listener_ssl_settings(cfg, listener, security_protocol), security_protocol)
    if security_protocol in SASL_PROTOCOLS:
        security = with_inter_broker_sasl(cfg, listener, security)
    return security


def with_inter_broker_sasl(cfg: ListenerSettings, listener: str, security: ClientSecurity) -> ClientSecurity:
    """`sasl.mechanism.inter.broker.protocol` and the username/password of that mechanism's JAAS
    config on the listener (broker/security/sasl_listeners.py; checked when the config loads)."""
    mechanism, username, password = inter_broker_sasl(cfg.listener_setting, listener)
    return dataclasses.replace(security, sasl_mechanism=mechanism, sasl_username=username, sasl_password=password)
