"""Sample services built only on boost_tenancy's public API."""
