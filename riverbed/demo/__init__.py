"""``make demo``: riverbed end to end on one machine, with what happened and how fast.

``python -m riverbed.demo [--data-dir DIR] [--events N] [--shop-seconds S]`` starts a broker
in-process (the embedded default) on a free port and goes through these sections
(:func:`run`, in :mod:`riverbed.demo.tour`), one module each, all with confluent-kafka, the
client every riverbed component uses:

- :mod:`~riverbed.demo.clickstream`: a topic of 3 partitions; a clickstream of JSON events
  keyed by user produced into it and read back (per-partition offsets, per-key order,
  throughput);
- :mod:`~riverbed.demo.consumer_group`: two consumers share the topic in a consumer group;
  after more events arrive, the group's lag;
- :mod:`~riverbed.demo.exactly_once`: a consume-transform-produce job copies the clicks to
  another topic exactly once with transactions, and aborts a transaction of junk on purpose;
- :mod:`~riverbed.demo.spark_page_counts`: a Spark Structured Streaming query counts clicks
  per page through the riverbed data source and writes the counts back exactly once;
- :mod:`~riverbed.demo.shop_pipelines`: the shop workload through the
  ``page_views_per_minute`` and ``fraud_alerts`` pipelines, window results, late events and
  fraud alerts shown as they arrive;
- :mod:`~riverbed.demo.shop_cdc`: the shop's PostgreSQL captured (CDC) into topics that feed
  ``enriched_clicks`` and ``category_sales``, checked against the database;
- :mod:`~riverbed.demo.on_disk`: the broker's files.

:mod:`~riverbed.demo.console` prints the sections' headers and timings, and gives every
client of the demo its logger for librdkafka's lines. Every check the demo prints ends in
``True`` when all is well (``tests/test_demo.py`` runs it at a small scale).
"""

from riverbed.demo.tour import run

__all__ = ["run"]
