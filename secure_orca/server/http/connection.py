"""h2's connection with the gateway's outbound header blocks: the indexed HPACK encoder, the carried load
report, and gRPC trailers-only responses. Every response block passes ``send_headers`` here once; two
comparisons tell the three kinds apart."""

from __future__ import annotations

from typing import Any

import h2.config
import h2.connection
import h2.settings

from secure_orca.server.hpack.headers import (
    REPORT_FIELD_NAME,
    HeaderBlockBuffer,
    IndexedEncoder,
    indexed_encoder,
    passes_unchanged,
    remember,
    table_decoder,
)

_GRPC_STATUS = b"grpc-status"


class GatewayH2Connection(h2.connection.H2Connection):
    """The server side of one HTTP/2 connection, as hypercorn configures h2's (``client_side=False``, headers as
    bytes), with three differences:

    - inbound header validation is off: ``protocol.GatewayH2Protocol`` runs h2's own validation per header block
      and refuses a malformed request as a stream error, where h2 would end the connection;
    - the encoder is ``IndexedEncoder`` (``server/hpack/headers.py``): hpack's bytes, found without scanning the
      table, installed before the first block (the peer's decoder mirrors the table from the start); the
      decoder is ``TableDecoder`` (the same module): hpack's, with its Huffman strings decoded by a byte-wise
      table (``server/hpack/huffman.py``) instead of a Python loop per nibble, installed before the first block; every
      inbound header block is bounded before it is decoded (``HeaderBlockBuffer``, its fragments at most twice
      the header-list limit; at most two size updates at its start, ``TableDecoder``), else the connection ends
      with GOAWAY;
    - ``send_headers`` recognises two kinds of response block by the first field after ``:status``:

      - the carried report (the middleware puts it there): the block is sent without it through h2, and the
        encoder appends it. h2 runs its outbound normalisation and validation on every field of every block;
        for the report's field, the same on every response of a sample, they run once per distinct field
        (``passes_unchanged``, h2's own functions), and a field they would change or refuse is not carried;
      - ``grpc-status`` (the out-of-band service's refusals, server/oob.py): a gRPC trailers-only response,
        sent as one HEADERS frame with END_STREAM (gRPC's PROTOCOL-HTTP2.md). hypercorn 0.18 sends an ASGI
        ``http.response.trailers`` before any response as HEADERS and then an empty DATA frame with END_STREAM,
        which gRPC clients read as headers without a status (grpcio: UNKNOWN, "Stream removed"); its empty DATA
        now finds the stream closed, which it already ignores.

    ``local_settings``: the settings hypercorn's ``H2Protocol`` gives its connection (its configuration's
    stream and header-list limits)."""

    def __init__(self, local_settings: h2.settings.Settings | None = None) -> None:
        super().__init__(
            config=h2.config.H2Configuration(client_side=False, header_encoding=None, validate_inbound_headers=False)
        )
        if local_settings is not None:
            self.local_settings = local_settings
        self.encoder = indexed_encoder(self.encoder)
        self.decoder = table_decoder(self.decoder)
        self.incoming_buffer = HeaderBlockBuffer(lambda: self.decoder.max_header_list_size)
        self._carried: dict[tuple[bytes, bytes], bool] = {}  # report field -> passes_unchanged (a few)

    def send_headers(
        self,
        stream_id: int,
        headers: Any,
        end_stream: bool = False,
        priority_weight: int | None = None,
        priority_depends_on: int | None = None,
        priority_exclusive: bool | None = None,
    ) -> None:
        if type(headers) is list and len(headers) > 1 and headers[0][0] == b":status":
            name = headers[1][0]
            if name == REPORT_FIELD_NAME:
                field = headers[1]
                carried = self._carried.get(field)
                if carried is None:
                    carried = remember(self._carried, field, passes_unchanged(field, self.config))
                encoder = self.encoder
                if carried and isinstance(encoder, IndexedEncoder):
                    del headers[1]  # hypercorn's list, built for this call
                    encoder.carried = field[1]
                    try:
                        return super().send_headers(
                            stream_id, headers, end_stream, priority_weight, priority_depends_on, priority_exclusive
                        )
                    finally:
                        encoder.carried = None  # never left for another block, whatever h2 raised
            elif name == _GRPC_STATUS:
                end_stream = True
        return super().send_headers(
            stream_id, headers, end_stream, priority_weight, priority_depends_on, priority_exclusive
        )
