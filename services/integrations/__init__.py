"""The IntegrationsServer: the HTTP front of the document pipeline, tenant from the bearer token.

create_app builds the Flask app; `python -m services.integrations` serves it from BOOST_* settings.
"""

from services.integrations.app import create_app

__all__ = ["create_app"]
