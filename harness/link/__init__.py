"""`drill link`: faults below the call. A byte relay that reads HTTP/2 as it passes, with Toxiproxy's toxics and API.

Owns: which connections a toxic hits (`draw`, pure), what a toxic is (`toxics`), the byte toxics as timing
stages (`schedule`, pure), HTTP/2 frames and streams (`h2`) and the toxics that act on them (`effects`), the
relay (`relay`), links and their set, the Python API a runner drives (`links`), Toxiproxy's admin API
(`admin`), the series (`metrics`) and the command (`cli`); the drill's per-call faults as frame operations
(`calls`, `callops`, `hblock`), decided by the interceptors' pipeline, and `drill proxy --plane link` (`plane`: the
proxy's options on a link, every stream a hop's call, the in-flight limit).
May import: harness.core, harness.interceptors (the one pipeline), harness.protos (each method's kind); the commands
also harness.demo (`lifecycle`: the port and ready files `drill proxy` writes). Never harness.proxy, its sibling.
"""

from harness.link.draw import connection_hit, preview
from harness.link.links import Link, LinkSet
from harness.link.toxics import Toxic, ToxicError, parse_toxic

__all__ = ["Link", "LinkSet", "Toxic", "ToxicError", "connection_hit", "parse_toxic", "preview"]
