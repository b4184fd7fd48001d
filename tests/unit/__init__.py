"""Unit tests: no broker needed; PostgreSQL-backed cases skip when it is absent."""
