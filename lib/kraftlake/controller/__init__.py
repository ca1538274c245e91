"""Kafka's controller managers as pure decisions: request + image -> records + response, shards' step, invariants."""
