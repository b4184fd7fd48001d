"""TenantAuthenticator and JwtSettings: only a verified token names a tenant, and refusals say why.

Every classic JWT attack is refused with a short reason, and a weak or ambiguous configuration
(alg none, mixed HMAC and public-key algorithms, short secrets, unfit keys) never starts.
"""

from __future__ import annotations

import time
from pathlib import Path

import jwt
import pytest
from cryptography.hazmat.primitives.asymmetric import ec

from boost_tenancy import BoostTenancyError, ConfigError, TenantId
from services.common.auth import AuthenticationError, JwtSettings, TenantAuthenticator
from tests.unit.services.tokens import (
    AUDIENCE,
    ISSUER,
    MISSING,
    SECRET,
    KeyPair,
    claims,
    ec_pair,
    hmac_token_with_key,
    hs256_settings,
    hs_token,
    rsa_pair,
    segment,
    signed_token,
    unsigned_token,
)


@pytest.fixture(scope="module")
def rsa_keys() -> KeyPair:
    return rsa_pair()


@pytest.fixture(scope="module")
def ec_keys() -> KeyPair:
    return ec_pair()


@pytest.fixture
def hs256() -> TenantAuthenticator:
    return TenantAuthenticator(hs256_settings())


def rs256(keys: KeyPair) -> TenantAuthenticator:
    return TenantAuthenticator(
        JwtSettings(
            algorithms=("RS256",), audience=AUDIENCE, issuer=ISSUER, public_key=keys.public_pem
        )
    )


def refusal(authenticator: TenantAuthenticator, token: str) -> str:
    with pytest.raises(AuthenticationError) as caught:
        authenticator.authenticate(token)
    return caught.value.reason


# -- accepted tokens ------------------------------------------------------------------------------
def test_a_valid_hs256_token_names_its_tenant(hs256: TenantAuthenticator) -> None:
    assert hs256.authenticate(hs_token("org-a")) == TenantId("org-a")


def test_a_uuid_tenant_is_returned_unchanged(hs256: TenantAuthenticator) -> None:
    tenant = "6F9619FF-8B86-D011-B42D-00CF4FC964FF"
    assert hs256.authenticate(hs_token(tenant)).value == tenant


def test_rs256_token_is_verified_with_the_public_key(rsa_keys: KeyPair) -> None:
    assert rs256(rsa_keys).authenticate(signed_token(rsa_keys, "RS256", "org-b")) == TenantId(
        "org-b"
    )


def test_es256_token_is_verified_with_the_public_key(ec_keys: KeyPair) -> None:
    settings = JwtSettings(
        algorithms=("ES256",), audience=AUDIENCE, issuer=ISSUER, public_key=ec_keys.public_pem
    )
    token = signed_token(ec_keys, "ES256", "org-c")
    assert TenantAuthenticator(settings).authenticate(token) == TenantId("org-c")


def test_the_tenant_claim_name_comes_from_the_settings() -> None:
    authenticator = TenantAuthenticator(hs256_settings(tenant_claim="org"))
    token = jwt.encode(claims(tenantId=MISSING, org="org-x"), SECRET, algorithm="HS256")
    assert authenticator.authenticate(token) == TenantId("org-x")


def test_an_audience_list_containing_ours_is_accepted(hs256: TenantAuthenticator) -> None:
    token = hs_token(aud=["another-api", AUDIENCE])
    assert hs256.authenticate(token) == TenantId("org-a")


def test_expiry_within_the_leeway_is_accepted(hs256: TenantAuthenticator) -> None:
    assert hs256.authenticate(hs_token(exp=int(time.time()) - 10)) == TenantId("org-a")


# -- refused tokens -------------------------------------------------------------------------------
@pytest.mark.parametrize("alg", ["none", "None", "NONE", "nOnE"])
def test_alg_none_is_refused_in_any_spelling(hs256: TenantAuthenticator, alg: str) -> None:
    assert refusal(hs256, unsigned_token(alg)) == "algorithm not allowed"


def test_a_token_signed_with_another_secret_is_refused(hs256: TenantAuthenticator) -> None:
    forged = hs_token(secret="another-secret-of-sufficient-length-000")
    assert refusal(hs256, forged) == "invalid signature"


def test_a_tampered_payload_is_refused(hs256: TenantAuthenticator) -> None:
    header, _, signature = hs_token("org-a").split(".")
    _, payload, _ = hs_token("org-b", secret="x" * 40).split(".")
    assert refusal(hs256, f"{header}.{payload}.{signature}") == "invalid signature"


def test_hs256_signed_with_the_public_key_is_refused_by_an_rs256_list(rsa_keys: KeyPair) -> None:
    # Key confusion: a verifier that let the token pick HS256 would check it with the public key.
    forged = hmac_token_with_key(rsa_keys.public_pem.encode())
    assert refusal(rs256(rsa_keys), forged) == "algorithm not allowed"


def test_an_algorithm_outside_the_allow_list_is_refused(hs256: TenantAuthenticator) -> None:
    assert refusal(hs256, hs_token(alg="HS512", secret="k" * 64)) == "algorithm not allowed"


def test_rs512_is_refused_when_only_rs256_is_allowed(rsa_keys: KeyPair) -> None:
    token = signed_token(rsa_keys, "RS512")
    assert refusal(rs256(rsa_keys), token) == "algorithm not allowed"


def test_an_expired_token_is_refused(hs256: TenantAuthenticator) -> None:
    assert refusal(hs256, hs_token(exp=int(time.time()) - 3600)) == "expired"


def test_a_token_without_exp_is_refused(hs256: TenantAuthenticator) -> None:
    assert refusal(hs256, hs_token(exp=MISSING)) == "missing claim"


@pytest.mark.parametrize("claim", ["exp", "nbf", "iat"])
@pytest.mark.parametrize("value", ["9999999999", True, [1], {"n": 1}])
def test_a_time_claim_that_is_no_number_is_refused(
    hs256: TenantAuthenticator, claim: str, value: object
) -> None:
    """Signed with the right key: PyJWT itself takes exp "9999999999" as a number."""
    assert refusal(hs256, hs_token(**{claim: value})) == f"claim {claim} is not a number"


@pytest.mark.parametrize("exp_from_now", [10**30, 86_400 + 31 + 60, 10 * 365 * 86_400])
def test_a_token_valid_for_longer_than_the_maximum_is_refused(
    hs256: TenantAuthenticator, exp_from_now: int
) -> None:
    now = int(time.time())
    assert refusal(hs256, hs_token(exp=now + exp_from_now)) == "token lifetime too long"


def test_a_token_issued_long_ago_for_a_long_life_is_refused(hs256: TenantAuthenticator) -> None:
    now = int(time.time())
    token = hs_token(iat=now - 2 * 86_400, exp=now + 600)
    assert refusal(hs256, token) == "token lifetime too long"


def test_the_maximum_lifetime_is_a_setting() -> None:
    now = int(time.time())
    week = TenantAuthenticator(hs256_settings(max_lifetime_s=7 * 86_400))
    assert week.authenticate(hs_token(exp=now + 3 * 86_400)).value == "org-a"
    with pytest.raises(ConfigError, match="max_lifetime_s"):
        hs256_settings(max_lifetime_s=10)


def test_a_token_not_valid_yet_is_refused(hs256: TenantAuthenticator) -> None:
    assert refusal(hs256, hs_token(nbf=int(time.time()) + 3600)) == "not yet valid"


def test_a_token_without_the_tenant_claim_is_refused(hs256: TenantAuthenticator) -> None:
    assert refusal(hs256, hs_token(MISSING)) == "missing claim"


@pytest.mark.parametrize("value", ["x' OR '1'='1", "", "org a", "-org", 42, ["org-a"], None])
def test_an_invalid_tenant_claim_is_refused(hs256: TenantAuthenticator, value: object) -> None:
    expected = "missing claim" if value is None else "invalid tenant claim"
    assert refusal(hs256, hs_token(value)) == expected


def test_a_token_for_another_audience_is_refused(hs256: TenantAuthenticator) -> None:
    assert refusal(hs256, hs_token(aud="another-api")) == "wrong audience"


def test_a_token_without_audience_is_refused(hs256: TenantAuthenticator) -> None:
    assert refusal(hs256, hs_token(aud=MISSING)) == "missing claim"


@pytest.mark.parametrize(
    "issuer", ["https://evil.example.test", "https://idp.example", "idp", [ISSUER], 7]
)
def test_a_token_from_another_issuer_is_refused(hs256: TenantAuthenticator, issuer: object) -> None:
    # A substring or a list of our issuer is another issuer (PyJWT 2.10.0 matched substrings).
    token = hmac_token_with_key(SECRET.encode(), iss=issuer)
    assert refusal(hs256, token) == "wrong issuer"


def test_a_token_without_issuer_is_refused(hs256: TenantAuthenticator) -> None:
    assert refusal(hs256, hs_token(iss=MISSING)) == "missing claim"


@pytest.mark.parametrize(
    "token", ["", "abc", "a.b", "a.b.c", "!!!.???.***", "eyJhbGciOiJIUzI1NiJ9.e30", "x" * 9000]
)
def test_a_malformed_token_is_refused(hs256: TenantAuthenticator, token: str) -> None:
    assert refusal(hs256, token) == "malformed token"


def test_a_header_without_alg_is_malformed(hs256: TenantAuthenticator) -> None:
    _, payload, signature = hs_token().split(".")
    for header in ({"typ": "JWT"}, {"alg": 256}, {"alg": ["HS256"]}):
        assert refusal(hs256, f"{segment(header)}.{payload}.{signature}") == "malformed token"


def test_the_error_never_carries_the_token(hs256: TenantAuthenticator) -> None:
    token = hs_token(secret="another-secret-of-sufficient-length-000")
    with pytest.raises(AuthenticationError) as caught:
        hs256.authenticate(token)
    error = caught.value
    assert isinstance(error, BoostTenancyError)
    assert error.__cause__ is None
    for part in token.split("."):
        assert part not in str(error)


# -- settings -------------------------------------------------------------------------------------
def test_settings_hide_the_secret_from_repr() -> None:
    assert SECRET not in repr(hs256_settings())


@pytest.mark.parametrize(
    ("algorithms", "message"),
    [
        ((), "is required"),
        (("none",), "unsigned tokens are never accepted"),
        (("HS256", "None"), "unsigned tokens are never accepted"),
        (("hs256",), "unsupported algorithm"),
        (("PS256",), "unsupported algorithm"),
        (("HS256", "HS256"), "twice"),
        (("HS256", "RS256"), "mixes HMAC and public-key"),
    ],
)
def test_weak_or_ambiguous_allow_lists_are_refused(
    algorithms: tuple[str, ...], message: str
) -> None:
    with pytest.raises(ConfigError, match=message):
        hs256_settings(algorithms=algorithms)


def test_a_secret_shorter_than_32_bytes_is_refused() -> None:
    with pytest.raises(ConfigError, match="31 bytes"):
        hs256_settings(secret="s" * 31)
    assert hs256_settings(secret="s" * 32).secret == "s" * 32


def test_longer_hashes_need_longer_secrets() -> None:
    with pytest.raises(ConfigError, match="at least 64 bytes"):
        hs256_settings(algorithms=("HS512",), secret="s" * 40)


def test_a_pem_key_is_refused_as_an_hmac_secret(rsa_keys: KeyPair) -> None:
    with pytest.raises(ConfigError, match="PEM"):
        hs256_settings(secret=rsa_keys.public_pem)


def test_hmac_needs_a_secret_and_no_public_key(rsa_keys: KeyPair) -> None:
    with pytest.raises(ConfigError, match="secret is required"):
        hs256_settings(secret=None)
    with pytest.raises(ConfigError, match="public_key is set"):
        hs256_settings(public_key=rsa_keys.public_pem)


def test_public_key_algorithms_need_a_key_and_no_secret(rsa_keys: KeyPair) -> None:
    with pytest.raises(ConfigError, match="public_key is required"):
        hs256_settings(algorithms=("RS256",), secret=None)
    with pytest.raises(ConfigError, match="secret is set"):
        hs256_settings(algorithms=("RS256",), public_key=rsa_keys.public_pem)


@pytest.mark.parametrize(
    ("algorithms", "which"),
    [(("RS256",), "ec"), (("ES256",), "rsa"), (("ES384",), "ec"), (("ES256", "ES384"), "ec")],
)
def test_a_key_that_cannot_verify_an_allowed_algorithm_is_refused(
    rsa_keys: KeyPair, ec_keys: KeyPair, algorithms: tuple[str, ...], which: str
) -> None:
    key = ec_keys if which == "ec" else rsa_keys
    with pytest.raises(ConfigError, match="cannot verify"):
        hs256_settings(algorithms=algorithms, secret=None, public_key=key.public_pem)


def test_es384_needs_a_p384_key() -> None:
    keys = ec_pair(ec.SECP384R1())
    settings = hs256_settings(algorithms=("ES384",), secret=None, public_key=keys.public_pem)
    token = signed_token(keys, "ES384", "org-d")
    assert TenantAuthenticator(settings).authenticate(token) == TenantId("org-d")


def test_short_rsa_keys_and_private_keys_are_refused(rsa_keys: KeyPair) -> None:
    weak = rsa_pair(1024)
    with pytest.raises(ConfigError, match="1024-bit"):
        hs256_settings(algorithms=("RS256",), secret=None, public_key=weak.public_pem)
    with pytest.raises(ConfigError, match="not a PEM public key"):
        hs256_settings(algorithms=("RS256",), secret=None, public_key=rsa_keys.private_pem.decode())


@pytest.mark.parametrize("field", ["audience", "issuer", "tenant_claim"])
def test_blank_audience_issuer_or_claim_is_refused(field: str) -> None:
    with pytest.raises(ConfigError, match=field):
        hs256_settings(**{field: " "})


@pytest.mark.parametrize("leeway", [-1, 301])
def test_the_leeway_is_bounded(leeway: int) -> None:
    with pytest.raises(ConfigError, match="leeway_s"):
        hs256_settings(leeway_s=leeway)


# -- from_env -------------------------------------------------------------------------------------
HS_ENV = {
    "BOOST_JWT_ALGORITHMS": "HS256",
    "BOOST_JWT_AUDIENCE": AUDIENCE,
    "BOOST_JWT_ISSUER": ISSUER,
    "BOOST_JWT_SECRET": SECRET,
}


def test_from_env_reads_a_list_and_sizes_the_secret_for_its_longest_hash() -> None:
    env = {**HS_ENV, "BOOST_JWT_ALGORITHMS": " HS256 , HS384 ,"}
    with pytest.raises(ConfigError, match=r"BOOST_JWT_SECRET .* at least 48 bytes"):
        JwtSettings.from_env(env)
    settings = JwtSettings.from_env({**env, "BOOST_JWT_SECRET": "s" * 48})
    assert settings.algorithms == ("HS256", "HS384")


def test_from_env_defaults() -> None:
    settings = JwtSettings.from_env(HS_ENV)
    assert settings == JwtSettings(
        algorithms=("HS256",),
        audience=AUDIENCE,
        issuer=ISSUER,
        tenant_claim="tenantId",
        secret=SECRET,
        leeway_s=30,
        max_lifetime_s=86_400,
    )
    assert (
        JwtSettings.from_env({**HS_ENV, "BOOST_JWT_MAX_LIFETIME_S": "3600"}).max_lifetime_s == 3600
    )


def test_from_env_reads_a_public_key_file(tmp_path: Path, rsa_keys: KeyPair) -> None:
    key_file = tmp_path / "idp.pem"
    key_file.write_text(rsa_keys.public_pem)
    env = {
        "BOOST_JWT_ALGORITHMS": "RS256,RS512",
        "BOOST_JWT_AUDIENCE": AUDIENCE,
        "BOOST_JWT_ISSUER": ISSUER,
        "BOOST_JWT_PUBLIC_KEY_FILE": str(key_file),
        "BOOST_JWT_TENANT_CLAIM": "org",
        "BOOST_JWT_LEEWAY_S": "5",
    }
    settings = JwtSettings.from_env(env)
    assert (settings.algorithms, settings.tenant_claim, settings.leeway_s) == (
        ("RS256", "RS512"),
        "org",
        5,
    )
    token = signed_token(rsa_keys, "RS512", tenantId=MISSING, org="org-e")
    assert TenantAuthenticator(settings).authenticate(token) == TenantId("org-e")


@pytest.mark.parametrize(
    ("change", "variable"),
    [
        ({"BOOST_JWT_ALGORITHMS": ""}, "BOOST_JWT_ALGORITHMS"),
        ({"BOOST_JWT_ALGORITHMS": "none"}, "BOOST_JWT_ALGORITHMS"),
        ({"BOOST_JWT_ALGORITHMS": "HS256,RS256"}, "BOOST_JWT_ALGORITHMS"),
        ({"BOOST_JWT_AUDIENCE": ""}, "BOOST_JWT_AUDIENCE"),
        ({"BOOST_JWT_ISSUER": ""}, "BOOST_JWT_ISSUER"),
        ({"BOOST_JWT_SECRET": "short"}, "BOOST_JWT_SECRET"),
        ({"BOOST_JWT_SECRET": ""}, "BOOST_JWT_SECRET"),
        ({"BOOST_JWT_LEEWAY_S": "soon"}, "BOOST_JWT_LEEWAY_S"),
        ({"BOOST_JWT_PUBLIC_KEY_FILE": "/nonexistent/key.pem"}, "BOOST_JWT_PUBLIC_KEY_FILE"),
    ],
)
def test_from_env_errors_name_the_variable(change: dict[str, str], variable: str) -> None:
    with pytest.raises(ConfigError, match=variable):
        JwtSettings.from_env({**HS_ENV, **change})


def test_from_env_refuses_an_unreadable_or_wrong_key_file(tmp_path: Path) -> None:
    env = {**HS_ENV, "BOOST_JWT_ALGORITHMS": "RS256", "BOOST_JWT_SECRET": ""}
    missing = {**env, "BOOST_JWT_PUBLIC_KEY_FILE": str(tmp_path / "absent.pem")}
    with pytest.raises(ConfigError, match="BOOST_JWT_PUBLIC_KEY_FILE cannot be read"):
        JwtSettings.from_env(missing)
    garbage = tmp_path / "garbage.pem"
    garbage.write_text("not a key")
    with pytest.raises(ConfigError, match="BOOST_JWT_PUBLIC_KEY_FILE is not a PEM public key"):
        JwtSettings.from_env({**env, "BOOST_JWT_PUBLIC_KEY_FILE": str(garbage)})
