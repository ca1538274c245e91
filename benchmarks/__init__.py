"""The benchmark suite behind ``jobs/bench.py``: stages, the continuous job, failover, scaling, a chart.

Kept apart from the library (as Kafka keeps ``jmh-benchmarks/``): it measures the library, it is not part of it.
"""
