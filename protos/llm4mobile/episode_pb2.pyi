from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class ObjectType(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    UNKNOWN_TYPE: _ClassVar[ObjectType]
    BUTTON: _ClassVar[ObjectType]
    CHECKBOX: _ClassVar[ObjectType]
    CHECKEDTEXTVIEW: _ClassVar[ObjectType]
    EDITTEXT: _ClassVar[ObjectType]
    IMAGEBUTTON: _ClassVar[ObjectType]
    IMAGEVIEW: _ClassVar[ObjectType]
    RADIOBUTTON: _ClassVar[ObjectType]
    SLIDINGDRAWER: _ClassVar[ObjectType]
    SPINNER: _ClassVar[ObjectType]
    SWITCH: _ClassVar[ObjectType]
    TABWIDGET: _ClassVar[ObjectType]
    TEXTVIEW: _ClassVar[ObjectType]
    TOGGLEBUTTON: _ClassVar[ObjectType]
    VIDEOVIEW: _ClassVar[ObjectType]
    APPWIDGETHOSTVIEW: _ClassVar[ObjectType]
    VIEW: _ClassVar[ObjectType]
    WEBVIEW: _ClassVar[ObjectType]
    FRAMELAYOUT: _ClassVar[ObjectType]
    HORIZONTALSCROLLVIEW: _ClassVar[ObjectType]
    LINEARLAYOUT: _ClassVar[ObjectType]
    LISTVIEW: _ClassVar[ObjectType]
    MULTIAUTOCOMPLETETEXTVIEW: _ClassVar[ObjectType]
    PROGRESSBAR: _ClassVar[ObjectType]
    RELATIVELAYOUT: _ClassVar[ObjectType]
    SCROLLVIEW: _ClassVar[ObjectType]
    TABHOST: _ClassVar[ObjectType]
    VIEWSWITCHER: _ClassVar[ObjectType]
    SEEKBAR: _ClassVar[ObjectType]

class GridLocation(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    UNKNOWN_LOCATION: _ClassVar[GridLocation]
    TOP_LEFT: _ClassVar[GridLocation]
    TOP_CENTER: _ClassVar[GridLocation]
    TOP_RIGHT: _ClassVar[GridLocation]
    LEFT: _ClassVar[GridLocation]
    CENTER: _ClassVar[GridLocation]
    RIGHT: _ClassVar[GridLocation]
    BOTTOM_LEFT: _ClassVar[GridLocation]
    BOTTOM_CENTER: _ClassVar[GridLocation]
    BOTTOM_RIGHT: _ClassVar[GridLocation]
UNKNOWN_TYPE: ObjectType
BUTTON: ObjectType
CHECKBOX: ObjectType
CHECKEDTEXTVIEW: ObjectType
EDITTEXT: ObjectType
IMAGEBUTTON: ObjectType
IMAGEVIEW: ObjectType
RADIOBUTTON: ObjectType
SLIDINGDRAWER: ObjectType
SPINNER: ObjectType
SWITCH: ObjectType
TABWIDGET: ObjectType
TEXTVIEW: ObjectType
TOGGLEBUTTON: ObjectType
VIDEOVIEW: ObjectType
APPWIDGETHOSTVIEW: ObjectType
VIEW: ObjectType
WEBVIEW: ObjectType
FRAMELAYOUT: ObjectType
HORIZONTALSCROLLVIEW: ObjectType
LINEARLAYOUT: ObjectType
LISTVIEW: ObjectType
MULTIAUTOCOMPLETETEXTVIEW: ObjectType
PROGRESSBAR: ObjectType
RELATIVELAYOUT: ObjectType
SCROLLVIEW: ObjectType
TABHOST: ObjectType
VIEWSWITCHER: ObjectType
SEEKBAR: ObjectType
UNKNOWN_LOCATION: GridLocation
TOP_LEFT: GridLocation
TOP_CENTER: GridLocation
TOP_RIGHT: GridLocation
LEFT: GridLocation
CENTER: GridLocation
RIGHT: GridLocation
BOTTOM_LEFT: GridLocation
BOTTOM_CENTER: GridLocation
BOTTOM_RIGHT: GridLocation

class Episode(_message.Message):
    __slots__ = ("time_steps",)
    TIME_STEPS_FIELD_NUMBER: _ClassVar[int]
    time_steps: _containers.RepeatedCompositeFieldContainer[TimeStep]
    def __init__(self, time_steps: _Optional[_Iterable[_Union[TimeStep, _Mapping]]] = ...) -> None: ...

class TimeStep(_message.Message):
    __slots__ = ("index", "observation")
    INDEX_FIELD_NUMBER: _ClassVar[int]
    OBSERVATION_FIELD_NUMBER: _ClassVar[int]
    index: int
    observation: Observation
    def __init__(self, index: _Optional[int] = ..., observation: _Optional[_Union[Observation, _Mapping]] = ...) -> None: ...

class Observation(_message.Message):
    __slots__ = ("objects", "screenshot", "image_id", "xml", "json", "screen_width", "screen_height", "debug_screenshot_filepath", "debug_vh_filepath")
    OBJECTS_FIELD_NUMBER: _ClassVar[int]
    SCREENSHOT_FIELD_NUMBER: _ClassVar[int]
    IMAGE_ID_FIELD_NUMBER: _ClassVar[int]
    XML_FIELD_NUMBER: _ClassVar[int]
    JSON_FIELD_NUMBER: _ClassVar[int]
    SCREEN_WIDTH_FIELD_NUMBER: _ClassVar[int]
    SCREEN_HEIGHT_FIELD_NUMBER: _ClassVar[int]
    DEBUG_SCREENSHOT_FILEPATH_FIELD_NUMBER: _ClassVar[int]
    DEBUG_VH_FILEPATH_FIELD_NUMBER: _ClassVar[int]
    objects: _containers.RepeatedCompositeFieldContainer[Object]
    screenshot: bytes
    image_id: str
    xml: bytes
    json: bytes
    screen_width: int
    screen_height: int
    debug_screenshot_filepath: str
    debug_vh_filepath: str
    def __init__(self, objects: _Optional[_Iterable[_Union[Object, _Mapping]]] = ..., screenshot: _Optional[bytes] = ..., image_id: _Optional[str] = ..., xml: _Optional[bytes] = ..., json: _Optional[bytes] = ..., screen_width: _Optional[int] = ..., screen_height: _Optional[int] = ..., debug_screenshot_filepath: _Optional[str] = ..., debug_vh_filepath: _Optional[str] = ...) -> None: ...

class Object(_message.Message):
    __slots__ = ("id", "index", "parent_id", "parent_index", "name", "type", "android_class", "android_package", "text", "content_desc", "resource_id", "clickable", "visible", "enabled", "focusable", "focused", "scrollable", "long_clickable", "selected", "checkable", "checked", "bbox", "multi_types", "grid_location", "dom_position", "is_leaf", "is_actionable", "text_hint")
    ID_FIELD_NUMBER: _ClassVar[int]
    INDEX_FIELD_NUMBER: _ClassVar[int]
    PARENT_ID_FIELD_NUMBER: _ClassVar[int]
    PARENT_INDEX_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    TYPE_FIELD_NUMBER: _ClassVar[int]
    ANDROID_CLASS_FIELD_NUMBER: _ClassVar[int]
    ANDROID_PACKAGE_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    CONTENT_DESC_FIELD_NUMBER: _ClassVar[int]
    RESOURCE_ID_FIELD_NUMBER: _ClassVar[int]
    CLICKABLE_FIELD_NUMBER: _ClassVar[int]
    VISIBLE_FIELD_NUMBER: _ClassVar[int]
    ENABLED_FIELD_NUMBER: _ClassVar[int]
    FOCUSABLE_FIELD_NUMBER: _ClassVar[int]
    FOCUSED_FIELD_NUMBER: _ClassVar[int]
    SCROLLABLE_FIELD_NUMBER: _ClassVar[int]
    LONG_CLICKABLE_FIELD_NUMBER: _ClassVar[int]
    SELECTED_FIELD_NUMBER: _ClassVar[int]
    CHECKABLE_FIELD_NUMBER: _ClassVar[int]
    CHECKED_FIELD_NUMBER: _ClassVar[int]
    BBOX_FIELD_NUMBER: _ClassVar[int]
    MULTI_TYPES_FIELD_NUMBER: _ClassVar[int]
    GRID_LOCATION_FIELD_NUMBER: _ClassVar[int]
    DOM_POSITION_FIELD_NUMBER: _ClassVar[int]
    IS_LEAF_FIELD_NUMBER: _ClassVar[int]
    IS_ACTIONABLE_FIELD_NUMBER: _ClassVar[int]
    TEXT_HINT_FIELD_NUMBER: _ClassVar[int]
    id: str
    index: int
    parent_id: str
    parent_index: int
    name: str
    type: ObjectType
    android_class: str
    android_package: str
    text: str
    content_desc: str
    resource_id: str
    clickable: bool
    visible: bool
    enabled: bool
    focusable: bool
    focused: bool
    scrollable: bool
    long_clickable: bool
    selected: bool
    checkable: bool
    checked: bool
    bbox: BoundingBox
    multi_types: _containers.RepeatedScalarFieldContainer[ObjectType]
    grid_location: GridLocation
    dom_position: DomPosition
    is_leaf: bool
    is_actionable: bool
    text_hint: str
    def __init__(self, id: _Optional[str] = ..., index: _Optional[int] = ..., parent_id: _Optional[str] = ..., parent_index: _Optional[int] = ..., name: _Optional[str] = ..., type: _Optional[_Union[ObjectType, str]] = ..., android_class: _Optional[str] = ..., android_package: _Optional[str] = ..., text: _Optional[str] = ..., content_desc: _Optional[str] = ..., resource_id: _Optional[str] = ..., clickable: bool = ..., visible: bool = ..., enabled: bool = ..., focusable: bool = ..., focused: bool = ..., scrollable: bool = ..., long_clickable: bool = ..., selected: bool = ..., checkable: bool = ..., checked: bool = ..., bbox: _Optional[_Union[BoundingBox, _Mapping]] = ..., multi_types: _Optional[_Iterable[_Union[ObjectType, str]]] = ..., grid_location: _Optional[_Union[GridLocation, str]] = ..., dom_position: _Optional[_Union[DomPosition, _Mapping]] = ..., is_leaf: bool = ..., is_actionable: bool = ..., text_hint: _Optional[str] = ...) -> None: ...

class BoundingBox(_message.Message):
    __slots__ = ("left", "right", "top", "bottom")
    LEFT_FIELD_NUMBER: _ClassVar[int]
    RIGHT_FIELD_NUMBER: _ClassVar[int]
    TOP_FIELD_NUMBER: _ClassVar[int]
    BOTTOM_FIELD_NUMBER: _ClassVar[int]
    left: int
    right: int
    top: int
    bottom: int
    def __init__(self, left: _Optional[int] = ..., right: _Optional[int] = ..., top: _Optional[int] = ..., bottom: _Optional[int] = ...) -> None: ...

class DomPosition(_message.Message):
    __slots__ = ("depth", "pre_order_id", "post_order_id")
    DEPTH_FIELD_NUMBER: _ClassVar[int]
    PRE_ORDER_ID_FIELD_NUMBER: _ClassVar[int]
    POST_ORDER_ID_FIELD_NUMBER: _ClassVar[int]
    depth: int
    pre_order_id: int
    post_order_id: int
    def __init__(self, depth: _Optional[int] = ..., pre_order_id: _Optional[int] = ..., post_order_id: _Optional[int] = ...) -> None: ...
