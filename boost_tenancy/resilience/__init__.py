"""Resilience: retry policy and backoff, redelivery strategies, dead letters and the error store."""
