"""The consumer-group coordinator and `__consumer_offsets` (issue 18)."""
