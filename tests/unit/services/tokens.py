"""Token factories for the authentication tests: valid tokens, forged ones and the keys behind them.

Forged tokens are built by hand where PyJWT refuses to make them (alg none, a PEM as HMAC key).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import time
from dataclasses import dataclass
from typing import Any

import jwt
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa

from services.common.auth import JwtSettings

SECRET = "a-test-secret-that-is-long-enough-for-hs256!"
AUDIENCE = "boost-integrations"
ISSUER = "https://idp.example.test"
MISSING = object()


def hs256_settings(**overrides: Any) -> JwtSettings:
    values: dict[str, Any] = {
        "algorithms": ("HS256",),
        "audience": AUDIENCE,
        "issuer": ISSUER,
        "secret": SECRET,
    }
    values.update(overrides)
    return JwtSettings(**values)


def claims(tenant: object = "org-a", **overrides: object) -> dict[str, Any]:
    """Valid claims for tenant; an override of MISSING drops that claim."""
    now = int(time.time())
    values: dict[str, Any] = {
        "tenantId": tenant,
        "aud": AUDIENCE,
        "iss": ISSUER,
        "iat": now,
        "exp": now + 600,
        "sub": "user-1",
    }
    values.update(overrides)
    return {k: v for k, v in values.items() if v is not MISSING}


def hs_token(
    tenant: object = "org-a", *, secret: str = SECRET, alg: str = "HS256", **kw: object
) -> str:
    return jwt.encode(claims(tenant, **kw), secret, algorithm=alg)


def b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def segment(value: dict[str, Any]) -> str:
    return b64url(json.dumps(value, separators=(",", ":")).encode())


def unsigned_token(alg: str = "none", tenant: str = "org-a") -> str:
    """header.payload. with an empty signature, as an alg-none attack sends it."""
    return f"{segment({'alg': alg, 'typ': 'JWT'})}.{segment(claims(tenant))}."


def hmac_token_with_key(key: bytes, tenant: object = "org-a", **kw: object) -> str:
    """An HS256 token signed by hand: PyJWT refuses a PEM key as an HMAC secret, and claims
    such as a non-string issuer."""
    signing_input = f"{segment({'alg': 'HS256', 'typ': 'JWT'})}.{segment(claims(tenant, **kw))}"
    signature = hmac.new(key, signing_input.encode("ascii"), hashlib.sha256).digest()
    return f"{signing_input}.{b64url(signature)}"


@dataclass(frozen=True)
class KeyPair:
    private_pem: bytes
    public_pem: str


def rsa_pair(bits: int = 2048) -> KeyPair:
    key = rsa.generate_private_key(public_exponent=65537, key_size=bits)
    return _pair(key)


def ec_pair(curve: ec.EllipticCurve | None = None) -> KeyPair:
    return _pair(ec.generate_private_key(curve or ec.SECP256R1()))


def _pair(key: rsa.RSAPrivateKey | ec.EllipticCurvePrivateKey) -> KeyPair:
    private = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    public = key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    return KeyPair(private, public.decode("ascii"))


def signed_token(pair: KeyPair, alg: str, tenant: str = "org-a", **kw: object) -> str:
    return jwt.encode(claims(tenant, **kw), pair.private_pem, algorithm=alg)


def token_parts(token: str) -> list[str]:
    """The token and each of its non-trivial segments, none of which may reach a log."""
    return [token, *(part for part in token.split(".") if len(part) >= 8)]
