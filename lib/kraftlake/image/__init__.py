"""The metadata image and the replay of every metadata record type into it (Kafka's `image` module)."""
