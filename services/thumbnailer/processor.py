"""The Thumbnailer service: cmd.thumbnail.generate in, documents/<id>/thumbnail.png out.

Input that cannot be previewed is a permanent failure: the command ends in its dead-letter queue.
"""

from __future__ import annotations

from boost_tenancy import HandlerContext, IncomingMessage, PermanentError, TenantProcessor
from services.common.blobs import LocalBlobStore, document_key
from services.common.contract import CMD_THUMBNAIL_GENERATE, document_id, field
from services.thumbnailer.thumbnail import ThumbnailError, make_thumbnail

THUMBNAIL_BLOB_NAME = "thumbnail.png"
THUMBNAIL_SIZE = 256


class Thumbnailer(TenantProcessor):
    """Renders the tenant's original to a PNG of at most 256x256 next to it in the blob store.

    Idempotent: a redelivered command rewrites the same blob.
    """

    queues = (CMD_THUMBNAIL_GENERATE,)

    def __init__(self, blobs: LocalBlobStore) -> None:
        self._blobs = blobs

    def handle(self, message: IncomingMessage, ctx: HandlerContext) -> None:
        body = message.data
        document = document_id(field(body, "documentUUID", str))
        blob_key = field(body, "blobKey", str)
        content_type = field(body, "contentType", str)

        # Missing blob: PermanentError (dead letter); store unavailable: TransientError (retried).
        data = self._blobs.get(ctx.tenant, blob_key)
        try:
            png = make_thumbnail(data, content_type=content_type, max_size=THUMBNAIL_SIZE)
        except ThumbnailError as exc:
            # No event exists for a failed thumbnail, and retrying cannot fix the input: the
            # dead-letter queue, with the reason recorded, is where an operator finds it.
            ctx.log.warning("thumbnail_failed", document=document, reason=exc.reason)
            raise PermanentError(f"cannot make a thumbnail: {exc.reason}") from exc

        thumbnail_key = document_key(document, THUMBNAIL_BLOB_NAME)
        self._blobs.put(ctx.tenant, thumbnail_key, png)
        ctx.log.info("thumbnail_stored", document=document, key=thumbnail_key, bytes=len(png))
