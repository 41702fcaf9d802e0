import datetime

from google.protobuf import struct_pb2 as _struct_pb2
from google.protobuf import timestamp_pb2 as _timestamp_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class EnvironmentSpec(_message.Message):
    __slots__ = ("id", "name", "additional_instructions", "sync", "max_episode_steps", "procgen", "atari", "dmlab", "net_hack", "robosuite", "robodesk")
    class Atari(_message.Message):
        __slots__ = ("id", "sticky_actions")
        ID_FIELD_NUMBER: _ClassVar[int]
        STICKY_ACTIONS_FIELD_NUMBER: _ClassVar[int]
        id: str
        sticky_actions: bool
        def __init__(self, id: _Optional[str] = ..., sticky_actions: bool = ...) -> None: ...
    class DMLab(_message.Message):
        __slots__ = ("id",)
        ID_FIELD_NUMBER: _ClassVar[int]
        id: str
        def __init__(self, id: _Optional[str] = ...) -> None: ...
    class NetHack(_message.Message):
        __slots__ = ("id",)
        ID_FIELD_NUMBER: _ClassVar[int]
        id: str
        def __init__(self, id: _Optional[str] = ...) -> None: ...
    class Procgen(_message.Message):
        __slots__ = ("id", "distribution_mode", "num_levels", "start_level", "level_repeats", "use_sequential_levels", "rand_seed")
        class DistributionMode(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
            __slots__ = ()
            DISTRIBUTION_UNSPECIFIED: _ClassVar[EnvironmentSpec.Procgen.DistributionMode]
            DISTRIBUTION_EASY: _ClassVar[EnvironmentSpec.Procgen.DistributionMode]
            DISTRIBUTION_HARD: _ClassVar[EnvironmentSpec.Procgen.DistributionMode]
            DISTRIBUTION_EXTREME: _ClassVar[EnvironmentSpec.Procgen.DistributionMode]
            DISTRIBUTION_MEMORY: _ClassVar[EnvironmentSpec.Procgen.DistributionMode]
            DISTRIBUTION_EXPLORATION: _ClassVar[EnvironmentSpec.Procgen.DistributionMode]
        DISTRIBUTION_UNSPECIFIED: EnvironmentSpec.Procgen.DistributionMode
        DISTRIBUTION_EASY: EnvironmentSpec.Procgen.DistributionMode
        DISTRIBUTION_HARD: EnvironmentSpec.Procgen.DistributionMode
        DISTRIBUTION_EXTREME: EnvironmentSpec.Procgen.DistributionMode
        DISTRIBUTION_MEMORY: EnvironmentSpec.Procgen.DistributionMode
        DISTRIBUTION_EXPLORATION: EnvironmentSpec.Procgen.DistributionMode
        ID_FIELD_NUMBER: _ClassVar[int]
        DISTRIBUTION_MODE_FIELD_NUMBER: _ClassVar[int]
        NUM_LEVELS_FIELD_NUMBER: _ClassVar[int]
        START_LEVEL_FIELD_NUMBER: _ClassVar[int]
        LEVEL_REPEATS_FIELD_NUMBER: _ClassVar[int]
        USE_SEQUENTIAL_LEVELS_FIELD_NUMBER: _ClassVar[int]
        RAND_SEED_FIELD_NUMBER: _ClassVar[int]
        id: str
        distribution_mode: EnvironmentSpec.Procgen.DistributionMode
        num_levels: int
        start_level: int
        level_repeats: int
        use_sequential_levels: bool
        rand_seed: int
        def __init__(self, id: _Optional[str] = ..., distribution_mode: _Optional[_Union[EnvironmentSpec.Procgen.DistributionMode, str]] = ..., num_levels: _Optional[int] = ..., start_level: _Optional[int] = ..., level_repeats: _Optional[int] = ..., use_sequential_levels: bool = ..., rand_seed: _Optional[int] = ...) -> None: ...
    class RoboDesk(_message.Message):
        __slots__ = ("task", "reward", "action_repeat", "image_size")
        class Reward(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
            __slots__ = ()
            REWARD_UNSPECIFIED: _ClassVar[EnvironmentSpec.RoboDesk.Reward]
            REWARD_DENSE: _ClassVar[EnvironmentSpec.RoboDesk.Reward]
            REWARD_SPARSE: _ClassVar[EnvironmentSpec.RoboDesk.Reward]
            REWARD_SUCCESS: _ClassVar[EnvironmentSpec.RoboDesk.Reward]
        REWARD_UNSPECIFIED: EnvironmentSpec.RoboDesk.Reward
        REWARD_DENSE: EnvironmentSpec.RoboDesk.Reward
        REWARD_SPARSE: EnvironmentSpec.RoboDesk.Reward
        REWARD_SUCCESS: EnvironmentSpec.RoboDesk.Reward
        TASK_FIELD_NUMBER: _ClassVar[int]
        REWARD_FIELD_NUMBER: _ClassVar[int]
        ACTION_REPEAT_FIELD_NUMBER: _ClassVar[int]
        IMAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
        task: str
        reward: EnvironmentSpec.RoboDesk.Reward
        action_repeat: int
        image_size: int
        def __init__(self, task: _Optional[str] = ..., reward: _Optional[_Union[EnvironmentSpec.RoboDesk.Reward, str]] = ..., action_repeat: _Optional[int] = ..., image_size: _Optional[int] = ...) -> None: ...
    class Robosuite(_message.Message):
        __slots__ = ("id", "robots", "config", "arm", "cameras", "controller", "pos_sensitivity", "rot_sensitivity", "use_camera_obs")
        ID_FIELD_NUMBER: _ClassVar[int]
        ROBOTS_FIELD_NUMBER: _ClassVar[int]
        CONFIG_FIELD_NUMBER: _ClassVar[int]
        ARM_FIELD_NUMBER: _ClassVar[int]
        CAMERAS_FIELD_NUMBER: _ClassVar[int]
        CONTROLLER_FIELD_NUMBER: _ClassVar[int]
        POS_SENSITIVITY_FIELD_NUMBER: _ClassVar[int]
        ROT_SENSITIVITY_FIELD_NUMBER: _ClassVar[int]
        USE_CAMERA_OBS_FIELD_NUMBER: _ClassVar[int]
        id: str
        robots: _containers.RepeatedScalarFieldContainer[str]
        config: str
        arm: str
        cameras: _containers.RepeatedScalarFieldContainer[str]
        controller: str
        pos_sensitivity: float
        rot_sensitivity: float
        use_camera_obs: bool
        def __init__(self, id: _Optional[str] = ..., robots: _Optional[_Iterable[str]] = ..., config: _Optional[str] = ..., arm: _Optional[str] = ..., cameras: _Optional[_Iterable[str]] = ..., controller: _Optional[str] = ..., pos_sensitivity: _Optional[float] = ..., rot_sensitivity: _Optional[float] = ..., use_camera_obs: bool = ...) -> None: ...
    ID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    ADDITIONAL_INSTRUCTIONS_FIELD_NUMBER: _ClassVar[int]
    SYNC_FIELD_NUMBER: _ClassVar[int]
    MAX_EPISODE_STEPS_FIELD_NUMBER: _ClassVar[int]
    PROCGEN_FIELD_NUMBER: _ClassVar[int]
    ATARI_FIELD_NUMBER: _ClassVar[int]
    DMLAB_FIELD_NUMBER: _ClassVar[int]
    NET_HACK_FIELD_NUMBER: _ClassVar[int]
    ROBOSUITE_FIELD_NUMBER: _ClassVar[int]
    ROBODESK_FIELD_NUMBER: _ClassVar[int]
    id: str
    name: str
    additional_instructions: str
    sync: bool
    max_episode_steps: int
    procgen: EnvironmentSpec.Procgen
    atari: EnvironmentSpec.Atari
    dmlab: EnvironmentSpec.DMLab
    net_hack: EnvironmentSpec.NetHack
    robosuite: EnvironmentSpec.Robosuite
    robodesk: EnvironmentSpec.RoboDesk
    def __init__(self, id: _Optional[str] = ..., name: _Optional[str] = ..., additional_instructions: _Optional[str] = ..., sync: bool = ..., max_episode_steps: _Optional[int] = ..., procgen: _Optional[_Union[EnvironmentSpec.Procgen, _Mapping]] = ..., atari: _Optional[_Union[EnvironmentSpec.Atari, _Mapping]] = ..., dmlab: _Optional[_Union[EnvironmentSpec.DMLab, _Mapping]] = ..., net_hack: _Optional[_Union[EnvironmentSpec.NetHack, _Mapping]] = ..., robosuite: _Optional[_Union[EnvironmentSpec.Robosuite, _Mapping]] = ..., robodesk: _Optional[_Union[EnvironmentSpec.RoboDesk, _Mapping]] = ...) -> None: ...

class Episode(_message.Message):
    __slots__ = ("id", "study_id", "environment_id", "user", "session_id", "state", "start_time", "end_time", "metadata", "num_steps", "total_reward", "storage", "tags", "notes", "controller_id", "step_metadata")
    class State(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        STATE_UNSPECIFIED: _ClassVar[Episode.State]
        STATE_COMPLETED: _ClassVar[Episode.State]
        STATE_ABANDONED: _ClassVar[Episode.State]
        STATE_CANCELLED: _ClassVar[Episode.State]
        STATE_REJECTED: _ClassVar[Episode.State]
    STATE_UNSPECIFIED: Episode.State
    STATE_COMPLETED: Episode.State
    STATE_ABANDONED: Episode.State
    STATE_CANCELLED: Episode.State
    STATE_REJECTED: Episode.State
    class Storage(_message.Message):
        __slots__ = ("environment_logger", "pickle")
        class EnvironmentLogger(_message.Message):
            __slots__ = ("tag_directory", "index")
            TAG_DIRECTORY_FIELD_NUMBER: _ClassVar[int]
            INDEX_FIELD_NUMBER: _ClassVar[int]
            tag_directory: str
            index: int
            def __init__(self, tag_directory: _Optional[str] = ..., index: _Optional[int] = ...) -> None: ...
        class Pickle(_message.Message):
            __slots__ = ("path",)
            PATH_FIELD_NUMBER: _ClassVar[int]
            path: str
            def __init__(self, path: _Optional[str] = ...) -> None: ...
        ENVIRONMENT_LOGGER_FIELD_NUMBER: _ClassVar[int]
        PICKLE_FIELD_NUMBER: _ClassVar[int]
        environment_logger: Episode.Storage.EnvironmentLogger
        pickle: Episode.Storage.Pickle
        def __init__(self, environment_logger: _Optional[_Union[Episode.Storage.EnvironmentLogger, _Mapping]] = ..., pickle: _Optional[_Union[Episode.Storage.Pickle, _Mapping]] = ...) -> None: ...
    class StepMetadataEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: int
        value: StepMetadata
        def __init__(self, key: _Optional[int] = ..., value: _Optional[_Union[StepMetadata, _Mapping]] = ...) -> None: ...
    ID_FIELD_NUMBER: _ClassVar[int]
    STUDY_ID_FIELD_NUMBER: _ClassVar[int]
    ENVIRONMENT_ID_FIELD_NUMBER: _ClassVar[int]
    USER_FIELD_NUMBER: _ClassVar[int]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    START_TIME_FIELD_NUMBER: _ClassVar[int]
    END_TIME_FIELD_NUMBER: _ClassVar[int]
    METADATA_FIELD_NUMBER: _ClassVar[int]
    NUM_STEPS_FIELD_NUMBER: _ClassVar[int]
    TOTAL_REWARD_FIELD_NUMBER: _ClassVar[int]
    STORAGE_FIELD_NUMBER: _ClassVar[int]
    TAGS_FIELD_NUMBER: _ClassVar[int]
    NOTES_FIELD_NUMBER: _ClassVar[int]
    CONTROLLER_ID_FIELD_NUMBER: _ClassVar[int]
    STEP_METADATA_FIELD_NUMBER: _ClassVar[int]
    id: str
    study_id: str
    environment_id: str
    user: User
    session_id: str
    state: Episode.State
    start_time: _timestamp_pb2.Timestamp
    end_time: _timestamp_pb2.Timestamp
    metadata: _struct_pb2.Struct
    num_steps: int
    total_reward: float
    storage: Episode.Storage
    tags: _containers.RepeatedCompositeFieldContainer[Tag]
    notes: str
    controller_id: str
    step_metadata: _containers.MessageMap[int, StepMetadata]
    def __init__(self, id: _Optional[str] = ..., study_id: _Optional[str] = ..., environment_id: _Optional[str] = ..., user: _Optional[_Union[User, _Mapping]] = ..., session_id: _Optional[str] = ..., state: _Optional[_Union[Episode.State, str]] = ..., start_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., end_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., metadata: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., num_steps: _Optional[int] = ..., total_reward: _Optional[float] = ..., storage: _Optional[_Union[Episode.Storage, _Mapping]] = ..., tags: _Optional[_Iterable[_Union[Tag, _Mapping]]] = ..., notes: _Optional[str] = ..., controller_id: _Optional[str] = ..., step_metadata: _Optional[_Mapping[int, StepMetadata]] = ...) -> None: ...

class Session(_message.Message):
    __slots__ = ("id", "study_id", "user", "state", "start_time", "end_time")
    class State(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        STATE_UNSPECIFIED: _ClassVar[Session.State]
        STATE_VALID: _ClassVar[Session.State]
        STATE_INVALID: _ClassVar[Session.State]
    STATE_UNSPECIFIED: Session.State
    STATE_VALID: Session.State
    STATE_INVALID: Session.State
    ID_FIELD_NUMBER: _ClassVar[int]
    STUDY_ID_FIELD_NUMBER: _ClassVar[int]
    USER_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    START_TIME_FIELD_NUMBER: _ClassVar[int]
    END_TIME_FIELD_NUMBER: _ClassVar[int]
    id: str
    study_id: str
    user: User
    state: Session.State
    start_time: _timestamp_pb2.Timestamp
    end_time: _timestamp_pb2.Timestamp
    def __init__(self, id: _Optional[str] = ..., study_id: _Optional[str] = ..., user: _Optional[_Union[User, _Mapping]] = ..., state: _Optional[_Union[Session.State, str]] = ..., start_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., end_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class StepMetadata(_message.Message):
    __slots__ = ("tags",)
    TAGS_FIELD_NUMBER: _ClassVar[int]
    tags: _containers.RepeatedCompositeFieldContainer[Tag]
    def __init__(self, tags: _Optional[_Iterable[_Union[Tag, _Mapping]]] = ...) -> None: ...

class StudySpec(_message.Message):
    __slots__ = ("id", "name", "description", "instructions", "creator", "creation_time", "state", "environment_specs")
    class State(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        STATE_UNSPECIFIED: _ClassVar[StudySpec.State]
        STATE_ENABLED: _ClassVar[StudySpec.State]
        STATE_DISABLED: _ClassVar[StudySpec.State]
    STATE_UNSPECIFIED: StudySpec.State
    STATE_ENABLED: StudySpec.State
    STATE_DISABLED: StudySpec.State
    ID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    DESCRIPTION_FIELD_NUMBER: _ClassVar[int]
    INSTRUCTIONS_FIELD_NUMBER: _ClassVar[int]
    CREATOR_FIELD_NUMBER: _ClassVar[int]
    CREATION_TIME_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    ENVIRONMENT_SPECS_FIELD_NUMBER: _ClassVar[int]
    id: str
    name: str
    description: str
    instructions: str
    creator: User
    creation_time: _timestamp_pb2.Timestamp
    state: StudySpec.State
    environment_specs: _containers.RepeatedCompositeFieldContainer[EnvironmentSpec]
    def __init__(self, id: _Optional[str] = ..., name: _Optional[str] = ..., description: _Optional[str] = ..., instructions: _Optional[str] = ..., creator: _Optional[_Union[User, _Mapping]] = ..., creation_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., state: _Optional[_Union[StudySpec.State, str]] = ..., environment_specs: _Optional[_Iterable[_Union[EnvironmentSpec, _Mapping]]] = ...) -> None: ...

class StudySpecs(_message.Message):
    __slots__ = ("study_specs",)
    STUDY_SPECS_FIELD_NUMBER: _ClassVar[int]
    study_specs: _containers.RepeatedCompositeFieldContainer[StudySpec]
    def __init__(self, study_specs: _Optional[_Iterable[_Union[StudySpec, _Mapping]]] = ...) -> None: ...

class Tag(_message.Message):
    __slots__ = ("label",)
    LABEL_FIELD_NUMBER: _ClassVar[int]
    label: str
    def __init__(self, label: _Optional[str] = ...) -> None: ...

class User(_message.Message):
    __slots__ = ("email",)
    EMAIL_FIELD_NUMBER: _ClassVar[int]
    email: str
    def __init__(self, email: _Optional[str] = ...) -> None: ...
