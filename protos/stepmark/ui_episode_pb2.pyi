from protos.llm4mobile import episode_pb2 as _episode_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class Action(_message.Message):
    __slots__ = ("type", "x", "y", "end_x", "end_y", "target_index", "target_id", "text", "duration_ms", "raw_json", "instruction", "direction", "target_rule", "target_candidates", "target_source", "converter_target_index")
    class Type(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        ACTION_UNSPECIFIED: _ClassVar[Action.Type]
        TAP: _ClassVar[Action.Type]
        LONG_PRESS: _ClassVar[Action.Type]
        SWIPE: _ClassVar[Action.Type]
        TYPE_TEXT: _ClassVar[Action.Type]
        BACK: _ClassVar[Action.Type]
        HOME: _ClassVar[Action.Type]
        ENTER: _ClassVar[Action.Type]
        WAIT: _ClassVar[Action.Type]
        OTHER: _ClassVar[Action.Type]
        OPEN_APP: _ClassVar[Action.Type]
        TASK_COMPLETE: _ClassVar[Action.Type]
        TASK_IMPOSSIBLE: _ClassVar[Action.Type]
    ACTION_UNSPECIFIED: Action.Type
    TAP: Action.Type
    LONG_PRESS: Action.Type
    SWIPE: Action.Type
    TYPE_TEXT: Action.Type
    BACK: Action.Type
    HOME: Action.Type
    ENTER: Action.Type
    WAIT: Action.Type
    OTHER: Action.Type
    OPEN_APP: Action.Type
    TASK_COMPLETE: Action.Type
    TASK_IMPOSSIBLE: Action.Type
    TYPE_FIELD_NUMBER: _ClassVar[int]
    X_FIELD_NUMBER: _ClassVar[int]
    Y_FIELD_NUMBER: _ClassVar[int]
    END_X_FIELD_NUMBER: _ClassVar[int]
    END_Y_FIELD_NUMBER: _ClassVar[int]
    TARGET_INDEX_FIELD_NUMBER: _ClassVar[int]
    TARGET_ID_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    DURATION_MS_FIELD_NUMBER: _ClassVar[int]
    RAW_JSON_FIELD_NUMBER: _ClassVar[int]
    INSTRUCTION_FIELD_NUMBER: _ClassVar[int]
    DIRECTION_FIELD_NUMBER: _ClassVar[int]
    TARGET_RULE_FIELD_NUMBER: _ClassVar[int]
    TARGET_CANDIDATES_FIELD_NUMBER: _ClassVar[int]
    TARGET_SOURCE_FIELD_NUMBER: _ClassVar[int]
    CONVERTER_TARGET_INDEX_FIELD_NUMBER: _ClassVar[int]
    type: Action.Type
    x: int
    y: int
    end_x: int
    end_y: int
    target_index: int
    target_id: str
    text: str
    duration_ms: int
    raw_json: str
    instruction: str
    direction: str
    target_rule: str
    target_candidates: _containers.RepeatedScalarFieldContainer[int]
    target_source: str
    converter_target_index: int
    def __init__(self, type: _Optional[_Union[Action.Type, str]] = ..., x: _Optional[int] = ..., y: _Optional[int] = ..., end_x: _Optional[int] = ..., end_y: _Optional[int] = ..., target_index: _Optional[int] = ..., target_id: _Optional[str] = ..., text: _Optional[str] = ..., duration_ms: _Optional[int] = ..., raw_json: _Optional[str] = ..., instruction: _Optional[str] = ..., direction: _Optional[str] = ..., target_rule: _Optional[str] = ..., target_candidates: _Optional[_Iterable[int]] = ..., target_source: _Optional[str] = ..., converter_target_index: _Optional[int] = ...) -> None: ...

class ObjectAnnotation(_message.Message):
    __slots__ = ("object_index", "object_id", "labels", "human_drawn", "box_corrected", "original_bbox", "authors")
    OBJECT_INDEX_FIELD_NUMBER: _ClassVar[int]
    OBJECT_ID_FIELD_NUMBER: _ClassVar[int]
    LABELS_FIELD_NUMBER: _ClassVar[int]
    HUMAN_DRAWN_FIELD_NUMBER: _ClassVar[int]
    BOX_CORRECTED_FIELD_NUMBER: _ClassVar[int]
    ORIGINAL_BBOX_FIELD_NUMBER: _ClassVar[int]
    AUTHORS_FIELD_NUMBER: _ClassVar[int]
    object_index: int
    object_id: str
    labels: _containers.RepeatedScalarFieldContainer[str]
    human_drawn: bool
    box_corrected: bool
    original_bbox: _episode_pb2.BoundingBox
    authors: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, object_index: _Optional[int] = ..., object_id: _Optional[str] = ..., labels: _Optional[_Iterable[str]] = ..., human_drawn: bool = ..., box_corrected: bool = ..., original_bbox: _Optional[_Union[_episode_pb2.BoundingBox, _Mapping]] = ..., authors: _Optional[_Iterable[str]] = ...) -> None: ...

class WindowInfo(_message.Message):
    __slots__ = ("id", "type", "layer", "title", "focused", "active", "accessibility_focused", "picture_in_picture", "display_id", "first_object", "num_objects")
    ID_FIELD_NUMBER: _ClassVar[int]
    TYPE_FIELD_NUMBER: _ClassVar[int]
    LAYER_FIELD_NUMBER: _ClassVar[int]
    TITLE_FIELD_NUMBER: _ClassVar[int]
    FOCUSED_FIELD_NUMBER: _ClassVar[int]
    ACTIVE_FIELD_NUMBER: _ClassVar[int]
    ACCESSIBILITY_FOCUSED_FIELD_NUMBER: _ClassVar[int]
    PICTURE_IN_PICTURE_FIELD_NUMBER: _ClassVar[int]
    DISPLAY_ID_FIELD_NUMBER: _ClassVar[int]
    FIRST_OBJECT_FIELD_NUMBER: _ClassVar[int]
    NUM_OBJECTS_FIELD_NUMBER: _ClassVar[int]
    id: int
    type: str
    layer: int
    title: str
    focused: bool
    active: bool
    accessibility_focused: bool
    picture_in_picture: bool
    display_id: int
    first_object: int
    num_objects: int
    def __init__(self, id: _Optional[int] = ..., type: _Optional[str] = ..., layer: _Optional[int] = ..., title: _Optional[str] = ..., focused: bool = ..., active: bool = ..., accessibility_focused: bool = ..., picture_in_picture: bool = ..., display_id: _Optional[int] = ..., first_object: _Optional[int] = ..., num_objects: _Optional[int] = ...) -> None: ...

class StepInfo(_message.Message):
    __slots__ = ("index", "hierarchy_path", "screenshot_path", "hierarchy_width", "hierarchy_height", "scale_x", "scale_y", "screenshot_format", "warnings", "rotation", "hierarchy_format", "windows", "object_annotations", "text")
    INDEX_FIELD_NUMBER: _ClassVar[int]
    HIERARCHY_PATH_FIELD_NUMBER: _ClassVar[int]
    SCREENSHOT_PATH_FIELD_NUMBER: _ClassVar[int]
    HIERARCHY_WIDTH_FIELD_NUMBER: _ClassVar[int]
    HIERARCHY_HEIGHT_FIELD_NUMBER: _ClassVar[int]
    SCALE_X_FIELD_NUMBER: _ClassVar[int]
    SCALE_Y_FIELD_NUMBER: _ClassVar[int]
    SCREENSHOT_FORMAT_FIELD_NUMBER: _ClassVar[int]
    WARNINGS_FIELD_NUMBER: _ClassVar[int]
    ROTATION_FIELD_NUMBER: _ClassVar[int]
    HIERARCHY_FORMAT_FIELD_NUMBER: _ClassVar[int]
    WINDOWS_FIELD_NUMBER: _ClassVar[int]
    OBJECT_ANNOTATIONS_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    index: int
    hierarchy_path: str
    screenshot_path: str
    hierarchy_width: int
    hierarchy_height: int
    scale_x: float
    scale_y: float
    screenshot_format: str
    warnings: _containers.RepeatedScalarFieldContainer[str]
    rotation: int
    hierarchy_format: str
    windows: _containers.RepeatedCompositeFieldContainer[WindowInfo]
    object_annotations: _containers.RepeatedCompositeFieldContainer[ObjectAnnotation]
    text: StepText
    def __init__(self, index: _Optional[int] = ..., hierarchy_path: _Optional[str] = ..., screenshot_path: _Optional[str] = ..., hierarchy_width: _Optional[int] = ..., hierarchy_height: _Optional[int] = ..., scale_x: _Optional[float] = ..., scale_y: _Optional[float] = ..., screenshot_format: _Optional[str] = ..., warnings: _Optional[_Iterable[str]] = ..., rotation: _Optional[int] = ..., hierarchy_format: _Optional[str] = ..., windows: _Optional[_Iterable[_Union[WindowInfo, _Mapping]]] = ..., object_annotations: _Optional[_Iterable[_Union[ObjectAnnotation, _Mapping]]] = ..., text: _Optional[_Union[StepText, _Mapping]] = ...) -> None: ...

class StepText(_message.Message):
    __slots__ = ("screen_description", "action_thought", "action_description", "action_result")
    SCREEN_DESCRIPTION_FIELD_NUMBER: _ClassVar[int]
    ACTION_THOUGHT_FIELD_NUMBER: _ClassVar[int]
    ACTION_DESCRIPTION_FIELD_NUMBER: _ClassVar[int]
    ACTION_RESULT_FIELD_NUMBER: _ClassVar[int]
    screen_description: str
    action_thought: str
    action_description: str
    action_result: str
    def __init__(self, screen_description: _Optional[str] = ..., action_thought: _Optional[str] = ..., action_description: _Optional[str] = ..., action_result: _Optional[str] = ...) -> None: ...

class UiEpisode(_message.Message):
    __slots__ = ("episode_id", "episode", "actions", "step_info", "app_package", "source", "source_path", "goal", "metadata", "part")
    class MetadataEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    EPISODE_ID_FIELD_NUMBER: _ClassVar[int]
    EPISODE_FIELD_NUMBER: _ClassVar[int]
    ACTIONS_FIELD_NUMBER: _ClassVar[int]
    STEP_INFO_FIELD_NUMBER: _ClassVar[int]
    APP_PACKAGE_FIELD_NUMBER: _ClassVar[int]
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    SOURCE_PATH_FIELD_NUMBER: _ClassVar[int]
    GOAL_FIELD_NUMBER: _ClassVar[int]
    METADATA_FIELD_NUMBER: _ClassVar[int]
    PART_FIELD_NUMBER: _ClassVar[int]
    episode_id: str
    episode: _episode_pb2.Episode
    actions: _containers.RepeatedCompositeFieldContainer[Action]
    step_info: _containers.RepeatedCompositeFieldContainer[StepInfo]
    app_package: str
    source: str
    source_path: str
    goal: str
    metadata: _containers.ScalarMap[str, str]
    part: RecordPart
    def __init__(self, episode_id: _Optional[str] = ..., episode: _Optional[_Union[_episode_pb2.Episode, _Mapping]] = ..., actions: _Optional[_Iterable[_Union[Action, _Mapping]]] = ..., step_info: _Optional[_Iterable[_Union[StepInfo, _Mapping]]] = ..., app_package: _Optional[str] = ..., source: _Optional[str] = ..., source_path: _Optional[str] = ..., goal: _Optional[str] = ..., metadata: _Optional[_Mapping[str, str]] = ..., part: _Optional[_Union[RecordPart, _Mapping]] = ...) -> None: ...

class RecordPart(_message.Message):
    __slots__ = ("episode_id", "index", "count", "first_step")
    EPISODE_ID_FIELD_NUMBER: _ClassVar[int]
    INDEX_FIELD_NUMBER: _ClassVar[int]
    COUNT_FIELD_NUMBER: _ClassVar[int]
    FIRST_STEP_FIELD_NUMBER: _ClassVar[int]
    episode_id: str
    index: int
    count: int
    first_step: int
    def __init__(self, episode_id: _Optional[str] = ..., index: _Optional[int] = ..., count: _Optional[int] = ..., first_step: _Optional[int] = ...) -> None: ...
