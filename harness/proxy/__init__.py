"""`drill proxy`: drill a service in any language by putting the fault pipeline in front of it.

Owns: forwarding every call to one upstream as bytes (`forward`), the command and each
method's kind read at start (`cli`, through `harness.protos`), `--workers` (`workers`).
May import: harness.demo (`lifecycle`: what it shares with `drill serve`), harness.interceptors (their public names),
harness.protos, harness.core.
"""
