"""`drill proxy`: drill a service in any language by putting the fault pipeline in front of it.

Owns: forwarding every call to one upstream as bytes (`forward`), each method's kind
(`kinds`), the command (`cli`).
May import: harness.demo (serve's start-up helpers), harness.interceptors, harness.core.
"""
