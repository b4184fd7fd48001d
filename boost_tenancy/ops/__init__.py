"""Operations on queues beside the processing path: parking (parking.py) and the dead-letter
admin that lists and re-drives a tenant's dead letters (dead_letters.py)."""
