"""The demo service (`drill.v1.Demo`): proto, servicer, `drill serve`, `drill client`,
the half-open probe. The only code that knows the demo's proto; the library does not import it.
"""
