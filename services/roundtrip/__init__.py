"""Round-trip sample: each tenant's requests answered by that tenant's processor alone."""
