"""Security: the ACL authorizer (TLS and SASL come later and fill in the request's principal)."""
