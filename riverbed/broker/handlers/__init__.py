"""One module per API family. Each exposes ``async handle(state, request) -> dict | None``.

A handler returns the response body as a plain dict in the newest version's field names
(``riverbed.protocol.encode_response`` fits it to the version the client speaks), or ``None``
when no response is due (``acks=0`` produce).
"""
