"""One client connection: frames in, requests handled, responses out in request order.

Requests of one connection are *started* in the order they arrive (so produce requests of
one producer reach the log in order, as its sequence numbers require) but may *finish* out
of order: a long-polling fetch or an ``acks=all`` produce waiting for its fsync does not
hold up the requests behind it. Responses are still written in request order, as the
protocol requires. At most ``max_in_flight`` requests run at once; past that the connection
stops reading, so a client that pipelines without limit is slowed down instead of growing
the broker's memory.

Fetch responses carry :class:`FileRecords` (regions of segment files) instead of bytes: the
connection writes the bytes around them and sends each region with ``loop.sendfile``, which
uses ``os.sendfile`` on a plain TCP socket, so stored batches go from the page cache to the
socket without passing through Python (zero-copy; asyncio falls back to reading the file
where sendfile cannot be used). Every region's descriptor is closed once sent or dropped.

A malformed frame, an unknown API or version (other than ApiVersions, which gets the
KIP-511 answer) closes this connection and nothing else; the reason is logged.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from typing import Any

from riverbed.broker.dispatch import HANDLERS
from riverbed.broker.state import CLIENT_HOST, BrokerState
from riverbed.log import FileRecords
from riverbed.protocol import (
    ApiKey,
    FrameReader,
    ProtocolError,
    Request,
    UnsupportedVersionError,
    decode_request,
    encode_response_parts,
    encode_unsupported_version,
)

__all__ = ["Connection"]

log = logging.getLogger(__name__)

# How much to read from the socket at once: large enough that a 1 MB produce request
# arrives in a handful of reads, small enough that an idle connection costs nothing.
READ_CHUNK_BYTES = 256 * 1024


class _Close(Exception):
    """Stop serving this connection (the reason is already logged)."""


class Connection:
    def __init__(
        self,
        state: BrokerState,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
    ) -> None:
        self._state = state
        self._reader = reader
        self._writer = writer
        self._frames = FrameReader(max_frame_bytes=state.config.socket_request_max_bytes)
        self._slots = asyncio.Semaphore(state.config.max_in_flight_per_connection)
        self._pending: asyncio.Queue[asyncio.Task[Parts | None] | None] = asyncio.Queue()
        self._answering: asyncio.Task[Parts | None] | None = None
        peer = writer.get_extra_info("peername")
        self.peer = f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) else str(peer)

    def abort(self) -> None:
        """Drop the connection now (broker shutdown): pending requests are cancelled, the
        one being answered too (a long-polling Fetch would keep its wait), and the
        responder is told to end (cancelling the queue drops its end marker)."""
        self._cancel_pending()
        if self._answering is not None:
            self._answering.cancel()
        self._pending.put_nowait(None)
        self._writer.transport.abort()

    async def serve(self) -> None:
        """Serve until the client closes, misbehaves, idles out, or the task is cancelled."""
        peer = self._writer.get_extra_info("peername")
        CLIENT_HOST.set(f"/{peer[0]}" if isinstance(peer, tuple) else "")  # Kafka's form
        responder = asyncio.create_task(self._respond())
        try:
            await self._read_requests()
        except _Close:
            pass
        except (ConnectionError, OSError) as e:
            log.debug("%s: connection error: %s", self.peer, e)
        finally:
            self._pending.put_nowait(None)
            with contextlib.suppress(asyncio.CancelledError, ConnectionError, OSError):
                await responder
            self._cancel_pending()
            self._writer.close()
            with contextlib.suppress(ConnectionError, OSError, asyncio.CancelledError):
                await self._writer.wait_closed()

    async def _read_requests(self) -> None:
        idle_s = self._state.config.connections_max_idle_ms / 1000
        while True:
            try:
                # asyncio.timeout, not wait_for: wait_for wraps every read in a new task.
                async with asyncio.timeout(idle_s):
                    data = await self._reader.read(READ_CHUNK_BYTES)
            except TimeoutError:
                if self._slots.locked() or not self._pending.empty():
                    continue  # requests still running: not idle
                log.info("%s: idle for %.0f s, closing", self.peer, idle_s)
                return
            if not data:
                return
            self._frames.receive_data(data)
            while True:
                try:
                    frame = self._frames.next_frame()
                    if frame is None:
                        break
                    await self._start(frame)
                except UnsupportedVersionError as e:
                    self._unsupported(e)
                except ProtocolError as e:
                    log.warning("%s: closing connection: %s", self.peer, e)
                    raise _Close from None

    def _unsupported(self, e: UnsupportedVersionError) -> None:
        if e.api_key == ApiKey.API_VERSIONS:
            # KIP-511: answer in v0 with UNSUPPORTED_VERSION and our ranges, so the
            # client can retry with a version we speak. The connection stays open.
            answer = encode_unsupported_version(
                e.api_key, e.correlation_id, served=frozenset(HANDLERS)
            )
            self._pending.put_nowait(asyncio.create_task(_ready(answer)))
            return
        log.warning(
            "%s: closing connection: unsupported API %s version %s",
            self.peer,
            e.api_key,
            e.api_version,
        )
        raise _Close from None

    async def _start(self, frame: bytes) -> None:
        request = decode_request(frame)
        if request.api_key not in HANDLERS:
            log.warning("%s: closing connection: API %s is not served", self.peer, request.api_key)
            raise _Close
        await self._slots.acquire()
        self._pending.put_nowait(asyncio.create_task(self._handle(request)))

    async def _handle(self, request: Request) -> Parts | None:
        key = ApiKey(request.api_key)
        handler = HANDLERS[key]
        metrics = self._state.metrics
        started = time.perf_counter()
        try:
            body = await handler(self._state, request)
        except asyncio.CancelledError:
            raise  # the connection was dropped: the request was not answered
        except Exception:
            metrics.request_failed(key, time.perf_counter() - started)
            raise
        finally:
            self._slots.release()
        metrics.request_done(key, time.perf_counter() - started, body)
        return None if body is None else encode_response_parts(request, body)

    async def _respond(self) -> None:
        while (task := await self._pending.get()) is not None:
            self._answering = task
            try:
                answer = await task
            except asyncio.CancelledError:
                if task.cancelled():  # abort() cancelled the request: nothing to send
                    return
                raise
            except Exception:
                # A bug in a handler must not take the broker down: drop this client
                # (it will reconnect and retry), keep everything else running.
                log.exception("%s: failed to serve a request; closing connection", self.peer)
                self._writer.close()
                return
            finally:
                self._answering = None
            if answer is not None:
                try:
                    await self._write(answer)
                except (ConnectionError, OSError) as e:
                    log.debug("%s: connection lost while answering: %s", self.peer, e)
                    return
                except RuntimeError:
                    # loop.sendfile refuses a transport the client closed meanwhile.
                    if not self._writer.transport.is_closing():
                        raise
                    return
                finally:
                    _release(answer)

    async def _write(self, parts: Parts) -> None:
        if self._writer.transport.is_closing():
            return  # the client went away while its request ran: nothing to answer
        loop = asyncio.get_running_loop()
        buffered: list[Any] = []
        for part in parts:
            if not isinstance(part, FileRecords):
                buffered.append(part)
                continue
            if buffered:
                self._writer.write(b"".join(buffered))
                buffered = []
            for region in part.regions:
                await loop.sendfile(
                    self._writer.transport, region.file, region.position, region.size
                )
        if buffered:
            self._writer.write(b"".join(buffered))
        await self._writer.drain()

    def _cancel_pending(self) -> None:
        while not self._pending.empty():
            task = self._pending.get_nowait()
            if task is None:
                continue
            if task.done() and not task.cancelled() and task.exception() is None:
                _release(task.result())
            else:
                task.cancel()


Parts = list[Any]
"""A response frame as pieces: bytes-like objects and FileRecords (see encode_response_parts)."""


def _release(parts: Parts | None) -> None:
    for part in parts or ():
        if isinstance(part, FileRecords):
            part.close()


async def _ready(answer: bytes) -> Parts | None:
    return [answer]
