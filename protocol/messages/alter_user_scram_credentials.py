"""AlterUserScramCredentials (key 51), version 0: request and response fields, as in Kafka 2.8.

Declared from Kafka 2.8.2's AlterUserScramCredentialsRequest.json and ...Response.json
(KIP-554; flexible from v0). The client sends the salt and the salted password, never the
password itself; mechanism is 1 (SCRAM-SHA-256) or 2 (SCRAM-SHA-512).
"""

from protocol.api_keys import ApiKey
from protocol.declare import F

API_KEY = ApiKey.ALTER_USER_SCRAM_CREDENTIALS
NAME = 'AlterUserScramCredentials'
VERSIONS = (0, 0)
FLEXIBLE_REQUEST_FROM = 0
FLEXIBLE_RESPONSE_FROM = 0

REQUEST = (
    F('deletions', '[]struct', (0, 0), fields=(
        F('name', 'string', (0, 0)),
        F('mechanism', 'int8', (0, 0)),
    )),
    F('upsertions', '[]struct', (0, 0), fields=(
        F('name', 'string', (0, 0)),
        F('mechanism', 'int8', (0, 0)),
        F('iterations', 'int32', (0, 0)),
        F('salt', 'bytes', (0, 0)),
        F('salted_password', 'bytes', (0, 0)),
    )),
)

RESPONSE = (
    F('throttle_time_ms', 'int32', (0, 0)),
    F('results', '[]struct', (0, 0), fields=(
        F('user', 'string', (0, 0)),
        F('error_code', 'int16', (0, 0)),
        F('error_message', 'string', (0, 0), nullable=(0, 0)),
    )),
)
