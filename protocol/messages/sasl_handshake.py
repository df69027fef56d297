"""SaslHandshake (key 17), versions 0-1: request and response fields, as in Kafka 2.8.

Declared from Kafka 2.8.2's SaslHandshakeRequest.json and SaslHandshakeResponse.json (v1 only
says that SaslAuthenticate requests carry the tokens; the fields are the same). Never flexible.
"""

from protocol.api_keys import ApiKey
from protocol.declare import F

API_KEY = ApiKey.SASL_HANDSHAKE
NAME = 'SaslHandshake'
VERSIONS = (0, 1)
FLEXIBLE_REQUEST_FROM = None
FLEXIBLE_RESPONSE_FROM = None

REQUEST = (
    F('mechanism', 'string', (0, 1)),
)

RESPONSE = (
    F('error_code', 'int16', (0, 1)),
    F('mechanisms', '[]string', (0, 1)),
)
