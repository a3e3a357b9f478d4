"""Probes: peak memory (`memory`) and step time (`timing`)."""
