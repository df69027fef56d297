"""DescribeUserScramCredentials (key 50), version 0: request and response fields, as in Kafka 2.8.

Declared from Kafka 2.8.2's DescribeUserScramCredentialsRequest.json and ...Response.json
(KIP-554; flexible from v0). `users` null or empty asks for every user with credentials.
"""

from protocol.api_keys import ApiKey
from protocol.declare import F

API_KEY = ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS
NAME = 'DescribeUserScramCredentials'
VERSIONS = (0, 0)
FLEXIBLE_REQUEST_FROM = 0
FLEXIBLE_RESPONSE_FROM = 0

REQUEST = (
    F('users', '[]struct', (0, 0), nullable=(0, 0), fields=(
        F('name', 'string', (0, 0)),
    )),
)

RESPONSE = (
    F('throttle_time_ms', 'int32', (0, 0)),
    F('error_code', 'int16', (0, 0)),
    F('error_message', 'string', (0, 0), nullable=(0, 0)),
    F('results', '[]struct', (0, 0), fields=(
        F('user', 'string', (0, 0)),
        F('error_code', 'int16', (0, 0)),
        F('error_message', 'string', (0, 0), nullable=(0, 0)),
        F('credential_infos', '[]struct', (0, 0), fields=(
            F('mechanism', 'int8', (0, 0)),
            F('iterations', 'int32', (0, 0)),
        )),
    )),
)
