"""The broker's ``GET /metrics``: scraped with Prometheus' text parser while real clients
produce, consume, commit and run transactions; the listener's settings and its HTTP edges."""

from __future__ import annotations

import asyncio
import dataclasses
import socket
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from riverbed.broker import Broker
from riverbed.broker.config import BrokerConfig, Listener
from riverbed.broker.metrics import api_name, error_counts
from riverbed.broker.server import BrokerServer, MetricsListenError
from riverbed.protocol import ApiKey, ErrorCode
from tests.support.brokers import start_broker_process
from tests.support.cli import run_riverbed
from tests.support.metrics import Scrape, scrape

METRICS_ON_A_FREE_PORT = {"metrics.listen": "127.0.0.1:0", "group.initial.rebalance.delay.ms": "0"}


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Broker]:
    data = tmp_path_factory.mktemp("metrics") / "data"
    with Broker(data, listen="127.0.0.1:0", config=METRICS_ON_A_FREE_PORT) as running:
        yield running


def metrics_of(broker: Broker) -> Scrape:
    assert broker.metrics_url is not None
    return scrape(broker.metrics_url)


def create_topic(broker: Broker, name: str, partitions: int) -> None:
    admin = AdminClient({"bootstrap.servers": broker.bootstrap_servers})
    admin.create_topics([NewTopic(name, num_partitions=partitions)])[name].result(timeout=30)


def produce(broker: Broker, topic: str, count: int, *, size: int = 100) -> None:
    producer = Producer({"bootstrap.servers": broker.bootstrap_servers, "acks": "all"})
    for i in range(count):
        producer.produce(topic, value=b"v" * size, key=b"%d" % i)
    assert producer.flush(30) == 0


def consume_all(broker: Broker, topic: str, group: str, count: int) -> None:
    consumer = Consumer(
        {
            "bootstrap.servers": broker.bootstrap_servers,
            "group.id": group,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": "false",
        }
    )
    consumer.subscribe([topic])
    seen = 0
    try:
        for _ in range(200):
            for message in consumer.consume(count - seen, 0.5):
                assert message.error() is None
                seen += 1
            if seen >= count:
                break
        assert seen == count
        consumer.commit(asynchronous=False)
    finally:
        consumer.close()


def end_offsets(metrics: Scrape, topic: str) -> dict[str, float]:
    return {
        dict(labels)["partition"]: value
        for labels, value in metrics.series("riverbed_log_end_offset").items()
        if dict(labels)["topic"] == topic
    }


def test_counters_and_offsets_move_with_real_producers_and_consumers(broker: Broker) -> None:
    create_topic(broker, "clicks", 2)
    before = metrics_of(broker)
    produce(broker, "clicks", 300, size=100)
    consume_all(broker, "clicks", "readers", 300)
    after = metrics_of(broker)

    assert after.types["riverbed_requests"] == "counter"
    assert after.types["riverbed_request_duration_seconds"] == "histogram"
    for api in ("Produce", "Fetch", "OffsetCommit", "Metadata"):
        moved = after.value("riverbed_requests_total", api=api) - before.value(
            "riverbed_requests_total", api=api
        )
        assert moved >= 1, api
        # Every request counted is timed: the histogram's count is the counter.
        assert after.value("riverbed_request_duration_seconds_count", api=api) == after.value(
            "riverbed_requests_total", api=api
        )
        assert after.value(
            "riverbed_request_duration_seconds_bucket", api=api, le="+Inf"
        ) == after.value("riverbed_requests_total", api=api)
    assert after.value("riverbed_topic_records_in_total", topic="clicks") == 300
    bytes_in = after.value("riverbed_topic_bytes_in_total", topic="clicks")
    assert bytes_in > 300 * 100  # the values, with the batches' headers
    # The group read every record once, so at least every byte appended went out.
    assert after.value("riverbed_topic_bytes_out_total", topic="clicks") >= bytes_in
    ends = end_offsets(after, "clicks")
    assert set(ends) == {"0", "1"} and sum(ends.values()) == 300
    for partition in ("0", "1"):
        assert after.value("riverbed_log_start_offset", topic="clicks", partition=partition) == 0
        assert after.value("riverbed_log_size_bytes", topic="clicks", partition=partition) > 0
        assert (
            after.value(
                "riverbed_consumer_group_lag", group="readers", topic="clicks", partition=partition
            )
            == 0
        )
        assert (
            after.value(
                "riverbed_consumer_group_committed_offset",
                group="readers",
                topic="clicks",
                partition=partition,
            )
            == ends[partition]
        )
    # acks=all: fsyncs on the request path were timed.
    assert after.value("riverbed_log_flush_duration_seconds_count") > before.value(
        "riverbed_log_flush_duration_seconds_count"
    )
    assert (
        after.value("riverbed_connections_opened_total")
        >= before.value("riverbed_connections_opened_total") + 2
    )
    # The internal topics are partitions too.
    assert any(
        dict(labels)["topic"] == "__consumer_offsets"
        for labels in after.series("riverbed_log_end_offset")
    )


def test_lag_is_log_end_less_committed_and_follows_new_records(broker: Broker) -> None:
    create_topic(broker, "orders", 1)
    produce(broker, "orders", 120)
    consumer = Consumer({"bootstrap.servers": broker.bootstrap_servers, "group.id": "behind"})
    try:
        consumer.commit(offsets=[TopicPartition("orders", 0, 20)], asynchronous=False)
        labels = {"group": "behind", "topic": "orders", "partition": "0"}
        assert metrics_of(broker).value("riverbed_consumer_group_lag", **labels) == 100
        produce(broker, "orders", 30)
        metrics = metrics_of(broker)
        assert metrics.value("riverbed_consumer_group_lag", **labels) == 130
        assert metrics.value("riverbed_consumer_group_committed_offset", **labels) == 20
        consumer.commit(offsets=[TopicPartition("orders", 0, 150)], asynchronous=False)
        assert metrics_of(broker).value("riverbed_consumer_group_lag", **labels) == 0
    finally:
        consumer.close()
    # A group id may hold any character: it comes back exactly, in both formats.
    odd = 'team "a" \\ b\nline two'
    consumer = Consumer({"bootstrap.servers": broker.bootstrap_servers, "group.id": odd})
    try:
        consumer.commit(offsets=[TopicPartition("orders", 0, 145)], asynchronous=False)
    finally:
        consumer.close()
    assert broker.metrics_url is not None
    for openmetrics in (False, True):
        metrics = scrape(broker.metrics_url, openmetrics=openmetrics)
        assert metrics.value("riverbed_consumer_group_lag", **{**labels, "group": odd}) == 5


def test_error_codes_in_answers_are_counted_by_api_and_error(broker: Broker) -> None:
    create_topic(broker, "twice", 1)
    labels = {"api": "CreateTopics", "error": "TOPIC_ALREADY_EXISTS"}
    before = metrics_of(broker).value("riverbed_request_errors_total", **labels)
    admin = AdminClient({"bootstrap.servers": broker.bootstrap_servers})
    future = admin.create_topics([NewTopic("twice", num_partitions=1)])["twice"]
    with pytest.raises(Exception, match="already exists"):
        future.result(timeout=30)
    assert metrics_of(broker).value("riverbed_request_errors_total", **labels) == before + 1


def test_open_transactions_are_counted_until_committed(broker: Broker) -> None:
    create_topic(broker, "txn", 1)
    producer = Producer(
        {"bootstrap.servers": broker.bootstrap_servers, "transactional.id": "metrics-txn"}
    )
    producer.init_transactions(30)
    assert metrics_of(broker).value("riverbed_transactions_open") == 0
    producer.begin_transaction()
    producer.produce("txn", value=b"in a transaction")
    assert producer.flush(30) == 0  # AddPartitionsToTxn has made it Ongoing
    assert metrics_of(broker).value("riverbed_transactions_open") == 1
    producer.commit_transaction(30)
    assert metrics_of(broker).value("riverbed_transactions_open") == 0


def test_a_deleted_topic_leaves_no_series(broker: Broker) -> None:
    create_topic(broker, "gone", 1)
    produce(broker, "gone", 5)
    assert metrics_of(broker).value("riverbed_topic_records_in_total", topic="gone") == 5
    admin = AdminClient({"bootstrap.servers": broker.bootstrap_servers})
    admin.delete_topics(["gone"])["gone"].result(timeout=30)
    after = metrics_of(broker)
    assert not after.has("riverbed_topic_records_in_total", topic="gone")
    assert end_offsets(after, "gone") == {}


def http(url: str, method: str = "GET") -> tuple[int, dict[str, str], bytes]:
    request = urllib.request.Request(url, method=method)
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, dict(response.headers), response.read()
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers), e.read()


def test_http_answers_only_get_and_head_of_metrics(broker: Broker) -> None:
    url = broker.metrics_url
    assert url is not None and url.endswith("/metrics")
    assert http(url.removesuffix("metrics"))[0] == 404
    status, headers, _ = http(url, "POST")
    assert (status, headers["Allow"]) == (405, "GET, HEAD")
    status, headers, body = http(url, "HEAD")
    assert status == 200 and body == b"" and int(headers["Content-Length"]) > 1000
    assert http(url + "?name[]=x")[0] == 200
    host, port = url.removeprefix("http://").split("/")[0].split(":")
    with socket.create_connection((host, int(port)), timeout=10) as raw:
        raw.sendall(b"not http at all\r\n\r\n")
        assert raw.recv(100).startswith(b"HTTP/1.1 400")
    # A Prometheus server asks for OpenMetrics and gets it.
    create_topic(broker, "negotiated", 1)
    produce(broker, "negotiated", 7)
    negotiated = scrape(url, openmetrics=True)
    assert negotiated.types["riverbed_requests"] == "counter"
    assert negotiated.value("riverbed_log_end_offset", topic="negotiated", partition="0") == 7


def test_metrics_listen_empty_serves_nothing(tmp_path: Path) -> None:
    with Broker(tmp_path / "d", listen="127.0.0.1:0", config={"metrics.listen": ""}) as quiet:
        assert quiet.metrics_url is None
        create_topic(quiet, "t", 1)  # and it serves clients as usual


def busy_port() -> socket.socket:
    holder = socket.socket()
    holder.bind(("127.0.0.1", 0))
    holder.listen()
    return holder


def test_an_address_in_use_stops_the_broker_only_when_metrics_listen_was_given(
    tmp_path: Path,
) -> None:
    with busy_port() as holder:
        taken = f"127.0.0.1:{holder.getsockname()[1]}"
        given = Broker(tmp_path / "a", listen="127.0.0.1:0", config={"metrics.listen": taken})
        with pytest.raises(MetricsListenError, match=rf"cannot serve metrics on {taken}"):
            given.start()
        # The same address as the default: the broker starts, without metrics.
        config, _ = BrokerConfig.build(data_dir=tmp_path / "b", listen="127.0.0.1:0")
        default = dataclasses.replace(config, metrics_listen=Listener.parse(taken))
        assert not default.metrics_listen_given

        async def start_and_stop() -> tuple[int, object]:
            server = BrokerServer(default)
            await server.start()
            try:
                return server.port, server.metrics_server
            finally:
                await server.stop()

        port, metrics_server = asyncio.run(start_and_stop())
        assert port > 0 and metrics_server is None
    # The data directory of the broker that failed was released: it starts now.
    with Broker(tmp_path / "a", listen="127.0.0.1:0", config=METRICS_ON_A_FREE_PORT) as again:
        assert again.metrics_url is not None


def test_cli_prints_the_metrics_url_and_refuses_a_bad_address(tmp_path: Path) -> None:
    running = start_broker_process(
        tmp_path / "data", extra_args=("--set", "metrics.listen=127.0.0.1:0")
    )
    try:
        url = running.metrics_url()
        assert url.startswith("http://127.0.0.1:") and url.endswith("/metrics")
        assert scrape(url).value("riverbed_connections_opened_total") == 0
    finally:
        assert running.stop() == 0
    bad = run_riverbed(
        "broker", "--data-dir", str(tmp_path / "x"), "--set", "metrics.listen=nowhere"
    )
    assert bad.returncode == 2
    assert "metrics.listen='nowhere'" in bad.stderr and "Traceback" not in bad.stderr


def test_error_counts_finds_codes_at_any_depth() -> None:
    body = {
        "error_code": 0,
        "responses": [
            {"name": "a", "partitions": [{"error_code": 3}, {"error_code": 0}, {"error_code": 3}]},
            {"name": "b", "partitions": [{"error_code": ErrorCode.not_leader_or_follower}]},
        ],
        "records": b"\x00" * 10,
    }
    assert error_counts(body) == {3: 2, int(ErrorCode.not_leader_or_follower): 1}
    assert error_counts({"error_code": 0, "topics": []}) == {}


def test_api_names_are_kafkas() -> None:
    assert api_name(ApiKey.PRODUCE) == "Produce"
    assert api_name(ApiKey.API_VERSIONS) == "ApiVersions"
    assert api_name(ApiKey.CONSUMER_GROUP_HEARTBEAT) == "ConsumerGroupHeartbeat"
