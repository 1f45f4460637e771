"""Write the demo's methods (drill.v1.Demo) as a descriptor set to the path given, from the generated module the
project's image already has (it has no protoc): what `drill proxy --descriptor-set` reads to know each method's
kind, so a unary call stays unary through the proxy (compose/retry-storm-go.yml)."""

import sys

from google.protobuf import descriptor_pb2

from harness.demo.proto import drill_pb2

files = descriptor_pb2.FileDescriptorSet()
drill_pb2.DESCRIPTOR.CopyToProto(files.file.add())
with open(sys.argv[1], "wb") as out:
    out.write(files.SerializeToString())
