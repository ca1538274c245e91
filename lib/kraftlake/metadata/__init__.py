"""Kafka's vocabulary, shared by every layer: message and table schemas, error codes, UUIDs, settings."""
