"""Optional drill token (DESIGN §2, `x-drill-token`).

When a server has a drill secret, a directive is applied only with a valid
HMAC-SHA256 over (request id, tenant, directive, ratio, target, expiry). A
spoofed `x-tenant-id` alone then injects nothing. Token format: `EXPIRY.HEX`,
EXPIRY in unix seconds.
"""

from __future__ import annotations

import hashlib
import hmac
import time


def _message(request_id: str, tenant: str, directive: str, ratio: int, target: str, expiry: int) -> bytes:
    return "\n".join((request_id, tenant, directive, str(ratio), target, str(expiry))).encode()


def sign(
    secret: str,
    *,
    request_id: str,
    tenant: str,
    directive: str,
    ratio: int = 100,
    target: str = "",
    ttl_s: float = 300.0,
    now: float | None = None,
) -> str:
    """Token authorising one directive for one request id until now + ttl."""
    expiry = int((time.time() if now is None else now) + ttl_s)
    mac = hmac.new(
        secret.encode(), _message(request_id, tenant, directive, ratio, target, expiry), hashlib.sha256
    )
    return f"{expiry}.{mac.hexdigest()}"


def verify(
    secret: str,
    token: str | None,
    *,
    request_id: str,
    tenant: str,
    directive: str,
    ratio: int = 100,
    target: str = "",
    now: float | None = None,
) -> bool:
    """True if the token is well formed, unexpired and signs exactly these values."""
    if not token or "." not in token or len(token) > 128:
        return False
    expiry_text, _, digest = token.partition(".")
    if not expiry_text.isdigit():
        return False
    expiry = int(expiry_text)
    if expiry < (time.time() if now is None else now):
        return False
    mac = hmac.new(
        secret.encode(), _message(request_id, tenant, directive, ratio, target, expiry), hashlib.sha256
    )
    return hmac.compare_digest(mac.hexdigest(), digest)
