"""Simulators that write logs a real cluster could have written: cluster requests, quorum traffic, workloads, sample data."""
