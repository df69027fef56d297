"""Partition replicas on this broker: the replica manager (roles, appends, high watermark, ISR upkeep),
lag-time ISR judgement, the replica fetchers' manager and the KIP-73 throttles."""
