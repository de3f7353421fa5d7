"""The riverbed broker: an asyncio server speaking the Kafka wire protocol over ``riverbed.log``.

``Broker`` runs it in-process (notebooks, tests); ``riverbed broker`` runs it as a command.
"""

from riverbed.broker.broker import Broker

__all__ = ["Broker"]
