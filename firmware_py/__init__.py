"""Device daemon (``edgedp-agent``): config, plan and data loading, ZeroMQ gossip, checkpoints.

The daemon is not built yet: the Agent state machine, the wire format and the ZeroMQ
transport it needs are the device-runtime work (see docs/ARCHITECTURE.md, "Status").
"""
