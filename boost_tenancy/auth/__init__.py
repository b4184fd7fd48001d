"""Authentication: the tenant of a request comes from a verified token, never from its body.

TenantAuthenticator checks a JWT against JwtSettings and returns the TenantId it was issued for.
"""

from boost_tenancy.auth.jwt import AuthenticationError, JwtSettings, TenantAuthenticator

__all__ = ["AuthenticationError", "JwtSettings", "TenantAuthenticator"]
