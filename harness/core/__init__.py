"""The contracts, pure and grpc-free: metadata keys, fault grammar and hit formula, gate,
status classes, settings, token, scope, audit log, metric names, tracing attributes.

Everything above (interceptors, resilience, demo, drills) builds on these; nothing
here imports grpc's server machinery or anything above it.
"""
