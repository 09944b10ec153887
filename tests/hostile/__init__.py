"""Hostile-peer harness: real agent processes attacked by a neighbour's key and by strangers."""
