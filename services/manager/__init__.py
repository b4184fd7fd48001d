"""The DocumentManager service: the only writer of document states in the pipeline.

It turns commands and stage events into state changes and sends what each change calls for.
"""

from services.manager.processor import DocumentManager, outputs_for

__all__ = ["DocumentManager", "outputs_for"]
