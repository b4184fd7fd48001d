"""The hostile processor as `boost-tenancy run` loads it: no constructor arguments, its queue
from POISON_QUEUE."""

from __future__ import annotations

import os

from tests.hostile import HostileProcessor


class PoisonProcessor(HostileProcessor):
    def __init__(self) -> None:
        super().__init__(os.environ["POISON_QUEUE"])
