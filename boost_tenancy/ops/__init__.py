"""Operations on queues beside the processing path: parking (parking.py), the dead-letter admin
that lists and re-drives a tenant's dead letters (dead_letters.py), the quarantine admin that
lists a queue's quarantine and assigns messages to a tenant (quarantine.py), and what the move
to per-tenant queues leaves to move (migration.py)."""
