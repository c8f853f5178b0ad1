"""Pieces of the network-namespace cluster harness (scripts/netns_cluster.py).

scenario: load and check a scenario file; net: namespaces, veths, the bridge,
tc shaping and cgroup CPU caps, and their removal; results: the results
folder (CSV files from logs and metrics). docs/heterogeneity.md explains all
of it.
"""
