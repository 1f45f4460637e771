from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable
from typing import ClassVar as _ClassVar, Optional as _Optional

DESCRIPTOR: _descriptor.FileDescriptor

class CallRequest(_message.Message):
    __slots__ = ("payload", "work_ms", "count")
    PAYLOAD_FIELD_NUMBER: _ClassVar[int]
    WORK_MS_FIELD_NUMBER: _ClassVar[int]
    COUNT_FIELD_NUMBER: _ClassVar[int]
    payload: str
    work_ms: int
    count: int
    def __init__(self, payload: _Optional[str] = ..., work_ms: _Optional[int] = ..., count: _Optional[int] = ...) -> None: ...

class CallReply(_message.Message):
    __slots__ = ("payload", "served_by", "path")
    PAYLOAD_FIELD_NUMBER: _ClassVar[int]
    SERVED_BY_FIELD_NUMBER: _ClassVar[int]
    PATH_FIELD_NUMBER: _ClassVar[int]
    payload: str
    served_by: str
    path: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, payload: _Optional[str] = ..., served_by: _Optional[str] = ..., path: _Optional[_Iterable[str]] = ...) -> None: ...
