"""SaslAuthenticate (key 36), versions 0-2: request and response fields, as in Kafka 2.8.

Declared from Kafka 2.8.2's SaslAuthenticateRequest.json and SaslAuthenticateResponse.json:
v1 adds session_lifetime_ms (KIP-368), v2 is flexible.
"""

from protocol.api_keys import ApiKey
from protocol.declare import F

API_KEY = ApiKey.SASL_AUTHENTICATE
NAME = 'SaslAuthenticate'
VERSIONS = (0, 2)
FLEXIBLE_REQUEST_FROM = 2
FLEXIBLE_RESPONSE_FROM = 2

REQUEST = (
    F('auth_bytes', 'bytes', (0, 2)),
)

RESPONSE = (
    F('error_code', 'int16', (0, 2)),
    F('error_message', 'string', (0, 2), nullable=(0, 2)),
    F('auth_bytes', 'bytes', (0, 2)),
    F('session_lifetime_ms', 'int64', (1, 2), default=0),
)
