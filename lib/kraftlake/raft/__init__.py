"""The metadata quorum (KIP-595): a sans-IO Raft node, its log and config, replicas driven by logged traffic, describe."""
