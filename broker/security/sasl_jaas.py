"""`sasl.jaas.config` values on a SASL listener, read with fetcher.jaas (Kafka's JaasConfig: one
login module entry). What the broker takes from them (Kafka's PlainLoginModule / ScramLoginModule):
PLAIN's users as `user_<name>="<password>"` (`LoginModule.users`), and `username`/`password`
(`LoginModule.client_credentials`), which the broker uses as its own client credentials on the
inter-broker listener. Errors never repeat the text (it holds passwords).
"""

from __future__ import annotations

from fetcher.jaas import JaasError, LoginModule, parse_jaas_config

PLAIN_MODULE = "org.apache.kafka.common.security.plain.PlainLoginModule"
SCRAM_MODULE = "org.apache.kafka.common.security.scram.ScramLoginModule"

__all__ = ["PLAIN_MODULE", "SCRAM_MODULE", "LoginModule", "JaasError", "parse_jaas_config"]
