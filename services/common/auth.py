"""Tenant identity from verified JWTs: signature, expiry, audience and issuer, then the tenant.

Accepted algorithms come from configuration only; the tenant claim must pass TenantId.parse.
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import jwt
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa

from boost_tenancy.envvars import env_int
from boost_tenancy.errors import BoostTenancyError, ConfigError, InvalidTenantError
from boost_tenancy.tenancy import TenantId

HMAC_ALGORITHMS: Final = ("HS256", "HS384", "HS512")
RSA_ALGORITHMS: Final = ("RS256", "RS384", "RS512")
EC_ALGORITHMS: Final = ("ES256", "ES384")
SUPPORTED_ALGORITHMS: Final = HMAC_ALGORITHMS + RSA_ALGORITHMS + EC_ALGORITHMS

MIN_SECRET_BYTES: Final = 32
DEFAULT_MAX_LIFETIME_S: Final = 86_400
"""The longest a token may be valid from now (exp - now), and from its issue (exp - iat): a
day by default. A signed token that is valid for ever cannot be taken back."""
TIME_CLAIMS: Final = ("exp", "nbf", "iat")
"""Claims that must be numbers (RFC 7519 NumericDate): PyJWT takes "9999999999" as a number."""
MIN_RSA_BITS: Final = 2048
MAX_LEEWAY_S: Final = 300
# A bearer token arrives in an HTTP header; anything this long is not a token we issue, and
# refusing it early keeps the parser away from attacker-sized input.
MAX_TOKEN_CHARS: Final = 8192

# RFC 7518 section 3.2: an HMAC key at least as long as the hash output.
_HMAC_KEY_BYTES: Final = {"HS256": 32, "HS384": 48, "HS512": 64}
_EC_CURVES: Final = {"ES256": ec.SECP256R1.name, "ES384": ec.SECP384R1.name}

PublicKey = rsa.RSAPublicKey | ec.EllipticCurvePublicKey


@dataclass(frozen=True, slots=True)
class _Names:
    """How a validation error names each setting: the field, or the environment variable."""

    algorithms: str
    audience: str
    issuer: str
    tenant_claim: str
    secret: str
    public_key: str
    leeway_s: str
    max_lifetime_s: str


_FIELD_NAMES: Final = _Names(
    "algorithms",
    "audience",
    "issuer",
    "tenant_claim",
    "secret",
    "public_key",
    "leeway_s",
    "max_lifetime_s",
)
_ENV_NAMES: Final = _Names(
    "BOOST_JWT_ALGORITHMS",
    "BOOST_JWT_AUDIENCE",
    "BOOST_JWT_ISSUER",
    "BOOST_JWT_TENANT_CLAIM",
    "BOOST_JWT_SECRET",
    "BOOST_JWT_PUBLIC_KEY_FILE",
    "BOOST_JWT_LEEWAY_S",
    "BOOST_JWT_MAX_LIFETIME_S",
)


def _check_algorithms(algorithms: tuple[str, ...], name: str) -> None:
    if not algorithms:
        raise ConfigError(f"{name} is required: a comma-separated list such as HS256 or RS256")
    for algorithm in algorithms:
        if algorithm.strip().lower() == "none":
            raise ConfigError(f"{name} lists 'none': unsigned tokens are never accepted")
        if algorithm not in SUPPORTED_ALGORITHMS:
            raise ConfigError(
                f"{name} lists the unsupported algorithm {algorithm!r}; "
                f"accepted: {', '.join(SUPPORTED_ALGORITHMS)}"
            )
    if len(set(algorithms)) != len(algorithms):
        raise ConfigError(f"{name} lists an algorithm twice: {', '.join(algorithms)}")
    hmac = [a for a in algorithms if a in HMAC_ALGORITHMS]
    if hmac and len(hmac) != len(algorithms):
        # With both kinds allowed, a token signed with HS256 using the public key as the secret
        # would be checked against that (public) key: the classic key-confusion forgery.
        raise ConfigError(
            f"{name} mixes HMAC and public-key algorithms ({', '.join(algorithms)}); "
            "allow one kind only"
        )


def _check_secret(algorithms: tuple[str, ...], secret: str, name: str) -> None:
    needed = max(MIN_SECRET_BYTES, *(_HMAC_KEY_BYTES[a] for a in algorithms))
    size = len(secret.encode("utf-8"))
    if size < needed:
        raise ConfigError(
            f"{name} is {size} bytes long; {', '.join(algorithms)} needs at least {needed} bytes"
        )
    if secret.lstrip().startswith("-----BEGIN"):
        raise ConfigError(f"{name} holds a PEM key; a public key is not an HMAC secret")


def load_public_key(
    pem: str, algorithms: tuple[str, ...], *, name: str = "public_key"
) -> PublicKey:
    """Load a PEM public key and check that it can verify every allowed algorithm."""
    try:
        key = serialization.load_pem_public_key(pem.encode("utf-8"))
    except (ValueError, TypeError) as exc:
        raise ConfigError(f"{name} is not a PEM public key: {exc}") from exc
    if isinstance(key, rsa.RSAPublicKey):
        misfits = [a for a in algorithms if a not in RSA_ALGORITHMS]
        if key.key_size < MIN_RSA_BITS:
            raise ConfigError(
                f"{name} is a {key.key_size}-bit RSA key; at least {MIN_RSA_BITS} bits needed"
            )
    elif isinstance(key, ec.EllipticCurvePublicKey):
        misfits = [a for a in algorithms if _EC_CURVES.get(a) != key.curve.name]
    else:
        raise ConfigError(f"{name} must be an RSA or EC public key, got {type(key).__name__}")
    if misfits:
        # An allowed algorithm the key cannot verify would only ever produce rejected tokens,
        # which hides the configuration mistake behind "invalid signature".
        raise ConfigError(f"{name} cannot verify {', '.join(misfits)}: allow only what it can")
    return key


def _validate(
    *,
    algorithms: tuple[str, ...],
    audience: str,
    issuer: str,
    tenant_claim: str,
    secret: str | None,
    public_key: str | None,
    leeway_s: int,
    max_lifetime_s: int,
    names: _Names,
) -> None:
    _check_algorithms(algorithms, names.algorithms)
    if not 60 <= max_lifetime_s <= 366 * 86_400:
        raise ConfigError(
            f"{names.max_lifetime_s} must be 60 seconds to a year, got {max_lifetime_s}"
        )
    for value, name in ((audience, names.audience), (issuer, names.issuer)):
        if not value.strip():
            raise ConfigError(f"{name} is required")
    if not tenant_claim.strip():
        raise ConfigError(f"{names.tenant_claim} must name a claim")
    if not 0 <= leeway_s <= MAX_LEEWAY_S:
        raise ConfigError(f"{names.leeway_s} must be 0-{MAX_LEEWAY_S} seconds, got {leeway_s}")
    if algorithms[0] in HMAC_ALGORITHMS:
        if public_key is not None:
            raise ConfigError(f"{names.public_key} is set but {names.algorithms} is HMAC only")
        if secret is None:
            raise ConfigError(f"{names.secret} is required for {', '.join(algorithms)}")
        _check_secret(algorithms, secret, names.secret)
    else:
        if secret is not None:
            raise ConfigError(f"{names.secret} is set but {names.algorithms} is public-key only")
        if public_key is None:
            raise ConfigError(f"{names.public_key} is required for {', '.join(algorithms)}")
        load_public_key(public_key, algorithms, name=names.public_key)


@dataclass(frozen=True, slots=True, kw_only=True)
class JwtSettings:
    """How bearer tokens are verified; the algorithm allow-list never comes from a token."""

    algorithms: tuple[str, ...]
    audience: str
    issuer: str
    tenant_claim: str = "tenantId"
    secret: str | None = field(default=None, repr=False)
    public_key: str | None = None
    leeway_s: int = 30
    max_lifetime_s: int = DEFAULT_MAX_LIFETIME_S
    """A token valid for longer than this, from now or from its iat, is refused."""

    def __post_init__(self) -> None:
        _validate(
            algorithms=self.algorithms,
            audience=self.audience,
            issuer=self.issuer,
            tenant_claim=self.tenant_claim,
            secret=self.secret,
            public_key=self.public_key,
            leeway_s=self.leeway_s,
            max_lifetime_s=self.max_lifetime_s,
            names=_FIELD_NAMES,
        )

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> JwtSettings:
        """BOOST_JWT_ALGORITHMS, _AUDIENCE, _ISSUER (required), _TENANT_CLAIM, _LEEWAY_S,
        _MAX_LIFETIME_S, and BOOST_JWT_SECRET (HS*) or BOOST_JWT_PUBLIC_KEY_FILE (RS*, ES*);
        errors name the variable."""
        algorithms = tuple(
            part.strip() for part in env.get("BOOST_JWT_ALGORITHMS", "").split(",") if part.strip()
        )
        secret = env.get("BOOST_JWT_SECRET") or None
        key_file = env.get("BOOST_JWT_PUBLIC_KEY_FILE") or None
        if secret is not None and key_file is not None:
            raise ConfigError("set BOOST_JWT_SECRET or BOOST_JWT_PUBLIC_KEY_FILE, not both")
        public_key = None
        if key_file is not None:
            try:
                public_key = Path(key_file).read_text(encoding="utf-8")
            except (OSError, UnicodeDecodeError) as exc:
                raise ConfigError(f"BOOST_JWT_PUBLIC_KEY_FILE cannot be read: {exc}") from exc
        values: dict[str, Any] = {
            "algorithms": algorithms,
            "audience": env.get("BOOST_JWT_AUDIENCE", ""),
            "issuer": env.get("BOOST_JWT_ISSUER", ""),
            "tenant_claim": env.get("BOOST_JWT_TENANT_CLAIM") or "tenantId",
            "secret": secret,
            "public_key": public_key,
            "leeway_s": env_int(env, "BOOST_JWT_LEEWAY_S", 30),
            "max_lifetime_s": env_int(env, "BOOST_JWT_MAX_LIFETIME_S", DEFAULT_MAX_LIFETIME_S),
        }
        # Validated here first so that an error names the variable rather than the field.
        _validate(**values, names=_ENV_NAMES)
        return cls(**values)


class AuthenticationError(BoostTenancyError):
    """A bearer token was refused; reason is short and safe to show (it never holds the token)."""

    def __init__(self, reason: str) -> None:
        self.reason = reason
        super().__init__(f"authentication failed: {reason}")


# Most specific first: InvalidSignatureError is a DecodeError, and every one an InvalidTokenError.
_REASONS: Final[tuple[tuple[type[Exception], str], ...]] = (
    (jwt.ExpiredSignatureError, "expired"),
    (jwt.InvalidSignatureError, "invalid signature"),
    (jwt.InvalidAlgorithmError, "algorithm not allowed"),
    (jwt.InvalidAudienceError, "wrong audience"),
    (jwt.InvalidIssuerError, "wrong issuer"),
    (jwt.MissingRequiredClaimError, "missing claim"),
    (jwt.ImmatureSignatureError, "not yet valid"),
    (jwt.DecodeError, "malformed token"),
    (jwt.InvalidKeyError, "invalid signature"),
)


def _reason(exc: Exception) -> str:
    for kind, reason in _REASONS:
        if isinstance(exc, kind):
            return reason
    return "invalid token"


class TenantAuthenticator:
    """Verifies bearer tokens and returns the tenant they were issued for."""

    def __init__(self, settings: JwtSettings) -> None:
        self._settings = settings
        self._algorithms = list(settings.algorithms)
        self._key: PublicKey | bytes
        if settings.public_key is not None:
            self._key = load_public_key(settings.public_key, settings.algorithms)
        elif settings.secret is not None:
            self._key = settings.secret.encode("utf-8")
        else:  # JwtSettings refuses this; kept so a key is never silently missing
            raise ConfigError("JwtSettings has neither a secret nor a public key")

    @property
    def settings(self) -> JwtSettings:
        return self._settings

    def _check_header(self, token: str) -> None:
        try:
            header = jwt.get_unverified_header(token)
        except jwt.PyJWTError:
            raise AuthenticationError("malformed token") from None
        algorithm = header.get("alg")
        if not isinstance(algorithm, str):
            raise AuthenticationError("malformed token")
        # Checked here as well as by PyJWT: the header is attacker-controlled, and refusing an
        # unlisted algorithm before any key is touched rules out none and key confusion.
        if algorithm.strip().lower() == "none" or algorithm not in self._settings.algorithms:
            raise AuthenticationError("algorithm not allowed")

    def _check_lifetime(self, claims: Mapping[str, Any]) -> None:
        """Time claims are numbers (RFC 7519 NumericDate), the token is valid now within the
        leeway, and for no longer than max_lifetime_s from now or from its iat. PyJWT alone
        accepts exp "9999999999" (a string) and 10**30."""
        for name in TIME_CLAIMS:
            value = claims.get(name)
            if value is None:
                continue
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise AuthenticationError(f"claim {name} is not a number")
            if not math.isfinite(value):
                raise AuthenticationError(f"claim {name} is not a number")
        leeway = self._settings.leeway_s
        now = time.time()
        expires = claims["exp"]
        if expires <= now - leeway:
            raise AuthenticationError("expired")
        not_before = claims.get("nbf")
        if not_before is not None and not_before > now + leeway:
            raise AuthenticationError("not yet valid")
        issued = claims.get("iat")
        if issued is not None and issued > now + leeway:
            raise AuthenticationError("not yet valid")
        limit = self._settings.max_lifetime_s + leeway
        if expires - now > limit or (issued is not None and expires - issued > limit):
            raise AuthenticationError("token lifetime too long")

    def authenticate(self, token: str) -> TenantId:
        """The tenant of a verified token; AuthenticationError says why a token was refused."""
        if not isinstance(token, str) or not token or len(token) > MAX_TOKEN_CHARS:
            raise AuthenticationError("malformed token")
        self._check_header(token)
        settings = self._settings
        try:
            claims = jwt.decode(
                token,
                self._key,
                algorithms=self._algorithms,
                audience=settings.audience,
                issuer=settings.issuer,
                # The time claims are checked below, their types first: PyJWT takes exp
                # "9999999999" (a string) for a number.
                options={
                    "require": ["exp", "aud", "iss"],
                    "verify_exp": False,
                    "verify_nbf": False,
                    "verify_iat": False,
                },
            )
        except jwt.PyJWTError as exc:
            raise AuthenticationError(_reason(exc)) from None
        # PyJWT 2.10.0 matched the issuer as a substring (CVE-2024-53861): compare exactly here.
        if claims.get("iss") != settings.issuer:
            raise AuthenticationError("wrong issuer")
        self._check_lifetime(claims)
        raw_tenant = claims.get(settings.tenant_claim)
        if raw_tenant is None:
            raise AuthenticationError("missing claim")
        try:
            return TenantId.parse(raw_tenant)
        except InvalidTenantError:
            raise AuthenticationError("invalid tenant claim") from None
