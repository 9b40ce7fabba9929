"""Experiments on this machine: replicas, h2load runs and the side-by-side evaluation."""
