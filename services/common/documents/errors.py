"""The document store's errors, each classed for the retry policy of the message that met it.

A failing database is transient and retried; a malformed or duplicate document is permanent.
"""

from __future__ import annotations

from boost_tenancy import PermanentError, TransientError


class DocumentStoreError(TransientError):
    """The database failed or is unreachable; the message that needed it is retried."""


class DocumentExistsError(PermanentError, ValueError):
    """A document with this id already exists for the tenant."""


class InvalidDocumentError(PermanentError, ValueError):
    """A document, transition or argument is malformed; retrying the same data cannot help."""


__all__ = ["DocumentExistsError", "DocumentStoreError", "InvalidDocumentError"]
