"""The server under hostile input: random and mutated frames, oversized sizes, idle sockets.

Throughout, a well-behaved client keeps producing and consuming, and the broker's memory
stays bounded.
"""

from __future__ import annotations

import random
import socket
import struct
import threading
import time

import psutil
from confluent_kafka import Producer

from tests.support.brokers import BrokerProcess
from tests.support.topics import partition_offset_values


# Real request frames to mutate: ApiVersions v3 (flexible) and Metadata v1.
def api_versions_v3(correlation_id: int) -> bytes:
    header = struct.pack(">hhih", 18, 3, correlation_id, 6) + b"client" + b"\x00"
    body = b"\x0blibrdkafka" + b"\x072.16.1" + b"\x00"
    return header + body


def frame(body: bytes) -> bytes:
    return struct.pack(">i", len(body)) + body


def metadata_v1(correlation_id: int, topic: str) -> bytes:
    name = topic.encode()
    return (
        struct.pack(">hhih", 3, 1, correlation_id, 2)
        + b"ct"
        + struct.pack(">i", 1)
        + struct.pack(">h", len(name))
        + name
    )


def send_and_close(port: int, payload: bytes, *, read: bool) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        sock.settimeout(2)
        try:
            sock.sendall(payload)
            if not read:
                return b""
            return sock.recv(65536)
        except (TimeoutError, ConnectionError):
            return b""


def healthy_round_trip(bootstrap: str, topic: str, count: int) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all"})
    for i in range(count):
        producer.produce(topic, value=b"ok-%d" % i)
    assert producer.flush(30) == 0


class SteadyClient:
    """A well-behaved producer that keeps producing (acks=all) on its own thread."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        self.topic = topic
        self.delivered = 0
        self.errors: list[str] = []
        self._producer = Producer(
            {"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True}
        )
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run)
        self._thread.start()

    def _on_delivery(self, err: object, _message: object) -> None:
        if err is None:
            self.delivered += 1
        else:
            self.errors.append(str(err))

    def _run(self) -> None:
        sent = 0
        while not self._stop.is_set():
            self._producer.produce(
                self.topic, value=b"steady-%d" % sent, on_delivery=self._on_delivery
            )
            sent += 1
            self._producer.poll(0.01)

    def wait_for_more_than(self, count: int, *, timeout_s: float = 10) -> None:
        deadline = time.monotonic() + timeout_s
        while self.delivered <= count:
            assert time.monotonic() < deadline, f"no delivery beyond {count} in {timeout_s} s"
            time.sleep(0.01)

    def stop(self) -> int:
        self._stop.set()
        self._thread.join()
        assert self._producer.flush(30) == 0
        return self.delivered


def test_random_and_mutated_frames_never_hurt_other_clients(
    broker_process: BrokerProcess,
) -> None:
    port = int(broker_process.bootstrap.split(":")[1])
    process = psutil.Process(broker_process.process.pid)
    rng = random.Random(20261122)
    seeds = [api_versions_v3(1), metadata_v1(7, "fuzzed")]
    healthy_round_trip(broker_process.bootstrap, "warm-up", 10)
    rss_start = process.memory_info().rss
    steady = SteadyClient(broker_process.bootstrap, "steady")
    steady.wait_for_more_than(0)

    for round_number in range(3000):
        kind = round_number % 5
        if kind == 0:  # random bytes, random length
            payload = rng.randbytes(rng.randint(0, 64))
        elif kind == 1:  # a valid size prefix, then a random body
            payload = frame(rng.randbytes(rng.randint(0, 200)))
        elif kind == 2:  # a real frame with a few bytes flipped
            body = bytearray(rng.choice(seeds))
            for _ in range(rng.randint(1, 4)):
                body[rng.randrange(len(body))] = rng.randrange(256)
            payload = frame(bytes(body))
        elif kind == 3:  # a real frame cut short
            whole = frame(rng.choice(seeds))
            payload = whole[: rng.randrange(len(whole))]
        else:  # an enormous or negative size prefix
            payload = struct.pack(">i", rng.choice([-1, -(2**31), 2**31 - 1, 200 * 1024**2]))
        send_and_close(port, payload, read=kind == 2)
        if round_number % 500 == 499:
            # The steady client is served throughout: more deliveries after every 500 rounds.
            steady.wait_for_more_than(steady.delivered)

    delivered = steady.stop()
    assert steady.errors == []
    assert broker_process.process.poll() is None, "the broker is still running"
    values = [v for _, _, v in partition_offset_values(broker_process.bootstrap, "steady", 1)]
    assert len(values) == delivered == len(set(values))
    rss_growth = process.memory_info().rss - rss_start
    assert rss_growth < 64 * 1024**2, f"RSS grew by {rss_growth / 1024**2:.0f} MiB"
    assert "Traceback" not in broker_process.log_text()


def test_hundreds_of_idle_connections_and_a_huge_declared_frame(
    broker_process: BrokerProcess,
) -> None:
    host, port_text = broker_process.bootstrap.split(":")
    port = int(port_text)
    process = psutil.Process(broker_process.process.pid)
    rss_start = process.memory_info().rss
    idle = [socket.create_connection((host, port), timeout=5) for _ in range(300)]
    try:
        # Each declares a 90 MiB request (under socket.request.max.bytes) and sends 1 KiB of
        # it: the broker must buffer what arrived, not what was promised.
        for sock in idle:
            sock.sendall(struct.pack(">i", 90 * 1024**2) + b"\x00" * 1024)
        time.sleep(1)
        healthy_round_trip(broker_process.bootstrap, "busy", 100)
        values = partition_offset_values(broker_process.bootstrap, "busy", 1)
        assert len(values) == 100
        rss_growth = process.memory_info().rss - rss_start
        assert rss_growth < 64 * 1024**2, f"RSS grew by {rss_growth / 1024**2:.0f} MiB"
    finally:
        for sock in idle:
            sock.close()
    assert broker_process.process.poll() is None


def test_request_over_the_size_limit_closes_only_that_connection(
    broker_process: BrokerProcess,
) -> None:
    port = int(broker_process.bootstrap.split(":")[1])
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        sock.sendall(struct.pack(">i", 101 * 1024**2))
        sock.settimeout(5)
        assert sock.recv(16) == b"", "the broker closed the connection"
    healthy_round_trip(broker_process.bootstrap, "after-big", 5)
    assert "closing connection" in broker_process.log_text()
