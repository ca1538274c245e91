"""kraftlake: the Kafka KRaft controller's metadata state machine over a Delta-backed metadata log."""

__version__ = "0.1.0"
