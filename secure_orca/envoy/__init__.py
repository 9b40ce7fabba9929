"""Envoy as the load balancer: bootstraps as data (pure) and a launcher for the real binary."""
