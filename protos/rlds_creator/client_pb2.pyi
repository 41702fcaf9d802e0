from protos.rlds_creator import study_pb2 as _study_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class ActionRequest(_message.Message):
    __slots__ = ("keys", "gamepad_input")
    KEYS_FIELD_NUMBER: _ClassVar[int]
    GAMEPAD_INPUT_FIELD_NUMBER: _ClassVar[int]
    keys: _containers.RepeatedScalarFieldContainer[str]
    gamepad_input: GamepadInput
    def __init__(self, keys: _Optional[_Iterable[str]] = ..., gamepad_input: _Optional[_Union[GamepadInput, _Mapping]] = ...) -> None: ...

class ActionResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class AddEpisodeTagRequest(_message.Message):
    __slots__ = ("tag",)
    TAG_FIELD_NUMBER: _ClassVar[int]
    tag: str
    def __init__(self, tag: _Optional[str] = ...) -> None: ...

class AddEpisodeTagResponse(_message.Message):
    __slots__ = ("tag", "success")
    TAG_FIELD_NUMBER: _ClassVar[int]
    SUCCESS_FIELD_NUMBER: _ClassVar[int]
    tag: str
    success: bool
    def __init__(self, tag: _Optional[str] = ..., success: bool = ...) -> None: ...

class AddStepTagRequest(_message.Message):
    __slots__ = ("index", "tag")
    INDEX_FIELD_NUMBER: _ClassVar[int]
    TAG_FIELD_NUMBER: _ClassVar[int]
    index: int
    tag: str
    def __init__(self, index: _Optional[int] = ..., tag: _Optional[str] = ...) -> None: ...

class AddStepTagResponse(_message.Message):
    __slots__ = ("index", "tag", "success")
    INDEX_FIELD_NUMBER: _ClassVar[int]
    TAG_FIELD_NUMBER: _ClassVar[int]
    SUCCESS_FIELD_NUMBER: _ClassVar[int]
    index: int
    tag: str
    success: bool
    def __init__(self, index: _Optional[int] = ..., tag: _Optional[str] = ..., success: bool = ...) -> None: ...

class ConfigResponse(_message.Message):
    __slots__ = ("config",)
    CONFIG_FIELD_NUMBER: _ClassVar[int]
    config: str
    def __init__(self, config: _Optional[str] = ...) -> None: ...

class ConfirmSaveResponse(_message.Message):
    __slots__ = ("mark_as_completed",)
    MARK_AS_COMPLETED_FIELD_NUMBER: _ClassVar[int]
    mark_as_completed: bool
    def __init__(self, mark_as_completed: bool = ...) -> None: ...

class Data(_message.Message):
    __slots__ = ("json_encoded", "images")
    class Image(_message.Message):
        __slots__ = ("name", "image")
        NAME_FIELD_NUMBER: _ClassVar[int]
        IMAGE_FIELD_NUMBER: _ClassVar[int]
        name: str
        image: bytes
        def __init__(self, name: _Optional[str] = ..., image: _Optional[bytes] = ...) -> None: ...
    JSON_ENCODED_FIELD_NUMBER: _ClassVar[int]
    IMAGES_FIELD_NUMBER: _ClassVar[int]
    json_encoded: str
    images: _containers.RepeatedCompositeFieldContainer[Data.Image]
    def __init__(self, json_encoded: _Optional[str] = ..., images: _Optional[_Iterable[_Union[Data.Image, _Mapping]]] = ...) -> None: ...

class DeleteEpisodeRequest(_message.Message):
    __slots__ = ("ref",)
    REF_FIELD_NUMBER: _ClassVar[int]
    ref: EpisodeRef
    def __init__(self, ref: _Optional[_Union[EpisodeRef, _Mapping]] = ...) -> None: ...

class DeleteEpisodeResponse(_message.Message):
    __slots__ = ("ref", "success")
    REF_FIELD_NUMBER: _ClassVar[int]
    SUCCESS_FIELD_NUMBER: _ClassVar[int]
    ref: EpisodeRef
    success: bool
    def __init__(self, ref: _Optional[_Union[EpisodeRef, _Mapping]] = ..., success: bool = ...) -> None: ...

class DownloadEpisodesRequest(_message.Message):
    __slots__ = ("refs", "archive", "strip_internal_metadata", "end_of_episode_tags")
    REFS_FIELD_NUMBER: _ClassVar[int]
    ARCHIVE_FIELD_NUMBER: _ClassVar[int]
    STRIP_INTERNAL_METADATA_FIELD_NUMBER: _ClassVar[int]
    END_OF_EPISODE_TAGS_FIELD_NUMBER: _ClassVar[int]
    refs: _containers.RepeatedCompositeFieldContainer[EpisodeRef]
    archive: bool
    strip_internal_metadata: bool
    end_of_episode_tags: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, refs: _Optional[_Iterable[_Union[EpisodeRef, _Mapping]]] = ..., archive: bool = ..., strip_internal_metadata: bool = ..., end_of_episode_tags: _Optional[_Iterable[str]] = ...) -> None: ...

class DownloadEpisodesResponse(_message.Message):
    __slots__ = ("url", "progress")
    URL_FIELD_NUMBER: _ClassVar[int]
    PROGRESS_FIELD_NUMBER: _ClassVar[int]
    url: str
    progress: float
    def __init__(self, url: _Optional[str] = ..., progress: _Optional[float] = ...) -> None: ...

class EnableStudyRequest(_message.Message):
    __slots__ = ("study_id", "enable")
    STUDY_ID_FIELD_NUMBER: _ClassVar[int]
    ENABLE_FIELD_NUMBER: _ClassVar[int]
    study_id: str
    enable: bool
    def __init__(self, study_id: _Optional[str] = ..., enable: bool = ...) -> None: ...

class EnableStudyResponse(_message.Message):
    __slots__ = ("study_id", "enabled")
    STUDY_ID_FIELD_NUMBER: _ClassVar[int]
    ENABLED_FIELD_NUMBER: _ClassVar[int]
    study_id: str
    enabled: bool
    def __init__(self, study_id: _Optional[str] = ..., enabled: bool = ...) -> None: ...

class EpisodeMetadata(_message.Message):
    __slots__ = ("study", "env", "episode", "duration", "video_url", "status", "can_delete")
    STUDY_FIELD_NUMBER: _ClassVar[int]
    ENV_FIELD_NUMBER: _ClassVar[int]
    EPISODE_FIELD_NUMBER: _ClassVar[int]
    DURATION_FIELD_NUMBER: _ClassVar[int]
    VIDEO_URL_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    CAN_DELETE_FIELD_NUMBER: _ClassVar[int]
    study: _study_pb2.StudySpec
    env: _study_pb2.EnvironmentSpec
    episode: _study_pb2.Episode
    duration: str
    video_url: str
    status: str
    can_delete: bool
    def __init__(self, study: _Optional[_Union[_study_pb2.StudySpec, _Mapping]] = ..., env: _Optional[_Union[_study_pb2.EnvironmentSpec, _Mapping]] = ..., episode: _Optional[_Union[_study_pb2.Episode, _Mapping]] = ..., duration: _Optional[str] = ..., video_url: _Optional[str] = ..., status: _Optional[str] = ..., can_delete: bool = ...) -> None: ...

class EpisodeRef(_message.Message):
    __slots__ = ("study_id", "session_id", "episode_id")
    STUDY_ID_FIELD_NUMBER: _ClassVar[int]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    EPISODE_ID_FIELD_NUMBER: _ClassVar[int]
    study_id: str
    session_id: str
    episode_id: str
    def __init__(self, study_id: _Optional[str] = ..., session_id: _Optional[str] = ..., episode_id: _Optional[str] = ...) -> None: ...

class EpisodesResponse(_message.Message):
    __slots__ = ("episodes",)
    EPISODES_FIELD_NUMBER: _ClassVar[int]
    episodes: _containers.RepeatedCompositeFieldContainer[EpisodeMetadata]
    def __init__(self, episodes: _Optional[_Iterable[_Union[EpisodeMetadata, _Mapping]]] = ...) -> None: ...

class ErrorResponse(_message.Message):
    __slots__ = ("mesg",)
    MESG_FIELD_NUMBER: _ClassVar[int]
    mesg: str
    def __init__(self, mesg: _Optional[str] = ...) -> None: ...

class GamepadInput(_message.Message):
    __slots__ = ("id", "buttons", "axes")
    class Button(_message.Message):
        __slots__ = ("pressed", "value")
        PRESSED_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        pressed: bool
        value: float
        def __init__(self, pressed: bool = ..., value: _Optional[float] = ...) -> None: ...
    class ButtonsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: int
        value: GamepadInput.Button
        def __init__(self, key: _Optional[int] = ..., value: _Optional[_Union[GamepadInput.Button, _Mapping]] = ...) -> None: ...
    class AxesEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: int
        value: float
        def __init__(self, key: _Optional[int] = ..., value: _Optional[float] = ...) -> None: ...
    ID_FIELD_NUMBER: _ClassVar[int]
    BUTTONS_FIELD_NUMBER: _ClassVar[int]
    AXES_FIELD_NUMBER: _ClassVar[int]
    id: str
    buttons: _containers.MessageMap[int, GamepadInput.Button]
    axes: _containers.ScalarMap[int, float]
    def __init__(self, id: _Optional[str] = ..., buttons: _Optional[_Mapping[int, GamepadInput.Button]] = ..., axes: _Optional[_Mapping[int, float]] = ...) -> None: ...

class OperationRequest(_message.Message):
    __slots__ = ("action", "add_episode_tag", "add_step_tag", "delete_episode", "download_episodes", "enable_study", "replay_step", "remove_episode_tag", "remove_step_tag", "replay_episode", "save_episode", "save_study", "select_environment", "select_study", "set_camera", "set_fps", "set_quality", "set_studies", "update_replay_episode")
    ACTION_FIELD_NUMBER: _ClassVar[int]
    ADD_EPISODE_TAG_FIELD_NUMBER: _ClassVar[int]
    ADD_STEP_TAG_FIELD_NUMBER: _ClassVar[int]
    DELETE_EPISODE_FIELD_NUMBER: _ClassVar[int]
    DOWNLOAD_EPISODES_FIELD_NUMBER: _ClassVar[int]
    ENABLE_STUDY_FIELD_NUMBER: _ClassVar[int]
    REPLAY_STEP_FIELD_NUMBER: _ClassVar[int]
    REMOVE_EPISODE_TAG_FIELD_NUMBER: _ClassVar[int]
    REMOVE_STEP_TAG_FIELD_NUMBER: _ClassVar[int]
    REPLAY_EPISODE_FIELD_NUMBER: _ClassVar[int]
    SAVE_EPISODE_FIELD_NUMBER: _ClassVar[int]
    SAVE_STUDY_FIELD_NUMBER: _ClassVar[int]
    SELECT_ENVIRONMENT_FIELD_NUMBER: _ClassVar[int]
    SELECT_STUDY_FIELD_NUMBER: _ClassVar[int]
    SET_CAMERA_FIELD_NUMBER: _ClassVar[int]
    SET_FPS_FIELD_NUMBER: _ClassVar[int]
    SET_QUALITY_FIELD_NUMBER: _ClassVar[int]
    SET_STUDIES_FIELD_NUMBER: _ClassVar[int]
    UPDATE_REPLAY_EPISODE_FIELD_NUMBER: _ClassVar[int]
    action: ActionRequest
    add_episode_tag: AddEpisodeTagRequest
    add_step_tag: AddStepTagRequest
    delete_episode: DeleteEpisodeRequest
    download_episodes: DownloadEpisodesRequest
    enable_study: EnableStudyRequest
    replay_step: ReplayStepRequest
    remove_episode_tag: RemoveEpisodeTagRequest
    remove_step_tag: RemoveStepTagRequest
    replay_episode: ReplayEpisodeRequest
    save_episode: SaveEpisodeRequest
    save_study: SaveStudyRequest
    select_environment: SelectEnvironmentRequest
    select_study: SelectStudyRequest
    set_camera: SetCameraRequest
    set_fps: SetFpsRequest
    set_quality: SetQualityRequest
    set_studies: SetStudiesRequest
    update_replay_episode: UpdateReplayEpisodeRequest
    def __init__(self, action: _Optional[_Union[ActionRequest, _Mapping]] = ..., add_episode_tag: _Optional[_Union[AddEpisodeTagRequest, _Mapping]] = ..., add_step_tag: _Optional[_Union[AddStepTagRequest, _Mapping]] = ..., delete_episode: _Optional[_Union[DeleteEpisodeRequest, _Mapping]] = ..., download_episodes: _Optional[_Union[DownloadEpisodesRequest, _Mapping]] = ..., enable_study: _Optional[_Union[EnableStudyRequest, _Mapping]] = ..., replay_step: _Optional[_Union[ReplayStepRequest, _Mapping]] = ..., remove_episode_tag: _Optional[_Union[RemoveEpisodeTagRequest, _Mapping]] = ..., remove_step_tag: _Optional[_Union[RemoveStepTagRequest, _Mapping]] = ..., replay_episode: _Optional[_Union[ReplayEpisodeRequest, _Mapping]] = ..., save_episode: _Optional[_Union[SaveEpisodeRequest, _Mapping]] = ..., save_study: _Optional[_Union[SaveStudyRequest, _Mapping]] = ..., select_environment: _Optional[_Union[SelectEnvironmentRequest, _Mapping]] = ..., select_study: _Optional[_Union[SelectStudyRequest, _Mapping]] = ..., set_camera: _Optional[_Union[SetCameraRequest, _Mapping]] = ..., set_fps: _Optional[_Union[SetFpsRequest, _Mapping]] = ..., set_quality: _Optional[_Union[SetQualityRequest, _Mapping]] = ..., set_studies: _Optional[_Union[SetStudiesRequest, _Mapping]] = ..., update_replay_episode: _Optional[_Union[UpdateReplayEpisodeRequest, _Mapping]] = ...) -> None: ...

class OperationResponse(_message.Message):
    __slots__ = ("action", "add_episode_tag", "add_step_tag", "config", "confirm_save", "delete_episode", "download_episodes", "enable_study", "episodes", "error", "replay_step", "pause", "remove_episode_tag", "remove_step_tag", "replay_episode", "save_episode", "save_study", "select_environment", "select_study", "set_camera", "set_fps", "set_studies", "step", "update_replay_episode")
    ACTION_FIELD_NUMBER: _ClassVar[int]
    ADD_EPISODE_TAG_FIELD_NUMBER: _ClassVar[int]
    ADD_STEP_TAG_FIELD_NUMBER: _ClassVar[int]
    CONFIG_FIELD_NUMBER: _ClassVar[int]
    CONFIRM_SAVE_FIELD_NUMBER: _ClassVar[int]
    DELETE_EPISODE_FIELD_NUMBER: _ClassVar[int]
    DOWNLOAD_EPISODES_FIELD_NUMBER: _ClassVar[int]
    ENABLE_STUDY_FIELD_NUMBER: _ClassVar[int]
    EPISODES_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    REPLAY_STEP_FIELD_NUMBER: _ClassVar[int]
    PAUSE_FIELD_NUMBER: _ClassVar[int]
    REMOVE_EPISODE_TAG_FIELD_NUMBER: _ClassVar[int]
    REMOVE_STEP_TAG_FIELD_NUMBER: _ClassVar[int]
    REPLAY_EPISODE_FIELD_NUMBER: _ClassVar[int]
    SAVE_EPISODE_FIELD_NUMBER: _ClassVar[int]
    SAVE_STUDY_FIELD_NUMBER: _ClassVar[int]
    SELECT_ENVIRONMENT_FIELD_NUMBER: _ClassVar[int]
    SELECT_STUDY_FIELD_NUMBER: _ClassVar[int]
    SET_CAMERA_FIELD_NUMBER: _ClassVar[int]
    SET_FPS_FIELD_NUMBER: _ClassVar[int]
    SET_STUDIES_FIELD_NUMBER: _ClassVar[int]
    STEP_FIELD_NUMBER: _ClassVar[int]
    UPDATE_REPLAY_EPISODE_FIELD_NUMBER: _ClassVar[int]
    action: ActionResponse
    add_episode_tag: AddEpisodeTagResponse
    add_step_tag: AddStepTagResponse
    config: ConfigResponse
    confirm_save: ConfirmSaveResponse
    delete_episode: DeleteEpisodeResponse
    download_episodes: DownloadEpisodesResponse
    enable_study: EnableStudyResponse
    episodes: EpisodesResponse
    error: ErrorResponse
    replay_step: ReplayStepResponse
    pause: PauseResponse
    remove_episode_tag: RemoveEpisodeTagResponse
    remove_step_tag: RemoveStepTagResponse
    replay_episode: ReplayEpisodeResponse
    save_episode: SaveEpisodeResponse
    save_study: SaveStudyResponse
    select_environment: SelectEnvironmentResponse
    select_study: SelectStudyResponse
    set_camera: SetCameraResponse
    set_fps: SetFpsResponse
    set_studies: SetStudiesResponse
    step: StepResponse
    update_replay_episode: UpdateReplayEpisodeResponse
    def __init__(self, action: _Optional[_Union[ActionResponse, _Mapping]] = ..., add_episode_tag: _Optional[_Union[AddEpisodeTagResponse, _Mapping]] = ..., add_step_tag: _Optional[_Union[AddStepTagResponse, _Mapping]] = ..., config: _Optional[_Union[ConfigResponse, _Mapping]] = ..., confirm_save: _Optional[_Union[ConfirmSaveResponse, _Mapping]] = ..., delete_episode: _Optional[_Union[DeleteEpisodeResponse, _Mapping]] = ..., download_episodes: _Optional[_Union[DownloadEpisodesResponse, _Mapping]] = ..., enable_study: _Optional[_Union[EnableStudyResponse, _Mapping]] = ..., episodes: _Optional[_Union[EpisodesResponse, _Mapping]] = ..., error: _Optional[_Union[ErrorResponse, _Mapping]] = ..., replay_step: _Optional[_Union[ReplayStepResponse, _Mapping]] = ..., pause: _Optional[_Union[PauseResponse, _Mapping]] = ..., remove_episode_tag: _Optional[_Union[RemoveEpisodeTagResponse, _Mapping]] = ..., remove_step_tag: _Optional[_Union[RemoveStepTagResponse, _Mapping]] = ..., replay_episode: _Optional[_Union[ReplayEpisodeResponse, _Mapping]] = ..., save_episode: _Optional[_Union[SaveEpisodeResponse, _Mapping]] = ..., save_study: _Optional[_Union[SaveStudyResponse, _Mapping]] = ..., select_environment: _Optional[_Union[SelectEnvironmentResponse, _Mapping]] = ..., select_study: _Optional[_Union[SelectStudyResponse, _Mapping]] = ..., set_camera: _Optional[_Union[SetCameraResponse, _Mapping]] = ..., set_fps: _Optional[_Union[SetFpsResponse, _Mapping]] = ..., set_studies: _Optional[_Union[SetStudiesResponse, _Mapping]] = ..., step: _Optional[_Union[StepResponse, _Mapping]] = ..., update_replay_episode: _Optional[_Union[UpdateReplayEpisodeResponse, _Mapping]] = ...) -> None: ...

class PauseResponse(_message.Message):
    __slots__ = ("paused",)
    PAUSED_FIELD_NUMBER: _ClassVar[int]
    paused: bool
    def __init__(self, paused: bool = ...) -> None: ...

class RemoveEpisodeTagRequest(_message.Message):
    __slots__ = ("tag",)
    TAG_FIELD_NUMBER: _ClassVar[int]
    tag: str
    def __init__(self, tag: _Optional[str] = ...) -> None: ...

class RemoveEpisodeTagResponse(_message.Message):
    __slots__ = ("tag", "success")
    TAG_FIELD_NUMBER: _ClassVar[int]
    SUCCESS_FIELD_NUMBER: _ClassVar[int]
    tag: str
    success: bool
    def __init__(self, tag: _Optional[str] = ..., success: bool = ...) -> None: ...

class RemoveStepTagRequest(_message.Message):
    __slots__ = ("index", "tag")
    INDEX_FIELD_NUMBER: _ClassVar[int]
    TAG_FIELD_NUMBER: _ClassVar[int]
    index: int
    tag: str
    def __init__(self, index: _Optional[int] = ..., tag: _Optional[str] = ...) -> None: ...

class RemoveStepTagResponse(_message.Message):
    __slots__ = ("index", "tag", "success")
    INDEX_FIELD_NUMBER: _ClassVar[int]
    TAG_FIELD_NUMBER: _ClassVar[int]
    SUCCESS_FIELD_NUMBER: _ClassVar[int]
    index: int
    tag: str
    success: bool
    def __init__(self, index: _Optional[int] = ..., tag: _Optional[str] = ..., success: bool = ...) -> None: ...

class ReplayEpisodeRequest(_message.Message):
    __slots__ = ("ref",)
    REF_FIELD_NUMBER: _ClassVar[int]
    ref: EpisodeRef
    def __init__(self, ref: _Optional[_Union[EpisodeRef, _Mapping]] = ...) -> None: ...

class ReplayEpisodeResponse(_message.Message):
    __slots__ = ("episode", "step_rewards")
    EPISODE_FIELD_NUMBER: _ClassVar[int]
    STEP_REWARDS_FIELD_NUMBER: _ClassVar[int]
    episode: EpisodeMetadata
    step_rewards: _containers.RepeatedScalarFieldContainer[float]
    def __init__(self, episode: _Optional[_Union[EpisodeMetadata, _Mapping]] = ..., step_rewards: _Optional[_Iterable[float]] = ...) -> None: ...

class ReplayStepRequest(_message.Message):
    __slots__ = ("index",)
    INDEX_FIELD_NUMBER: _ClassVar[int]
    index: int
    def __init__(self, index: _Optional[int] = ...) -> None: ...

class ReplayStepResponse(_message.Message):
    __slots__ = ("index", "image", "keys", "reward", "observation", "action", "tags")
    INDEX_FIELD_NUMBER: _ClassVar[int]
    IMAGE_FIELD_NUMBER: _ClassVar[int]
    KEYS_FIELD_NUMBER: _ClassVar[int]
    REWARD_FIELD_NUMBER: _ClassVar[int]
    OBSERVATION_FIELD_NUMBER: _ClassVar[int]
    ACTION_FIELD_NUMBER: _ClassVar[int]
    TAGS_FIELD_NUMBER: _ClassVar[int]
    index: int
    image: bytes
    keys: _containers.RepeatedScalarFieldContainer[str]
    reward: float
    observation: Data
    action: Data
    tags: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, index: _Optional[int] = ..., image: _Optional[bytes] = ..., keys: _Optional[_Iterable[str]] = ..., reward: _Optional[float] = ..., observation: _Optional[_Union[Data, _Mapping]] = ..., action: _Optional[_Union[Data, _Mapping]] = ..., tags: _Optional[_Iterable[str]] = ...) -> None: ...

class SaveEpisodeRequest(_message.Message):
    __slots__ = ("accept", "mark_as_completed")
    ACCEPT_FIELD_NUMBER: _ClassVar[int]
    MARK_AS_COMPLETED_FIELD_NUMBER: _ClassVar[int]
    accept: bool
    mark_as_completed: bool
    def __init__(self, accept: bool = ..., mark_as_completed: bool = ...) -> None: ...

class SaveEpisodeResponse(_message.Message):
    __slots__ = ("episode",)
    EPISODE_FIELD_NUMBER: _ClassVar[int]
    episode: EpisodeMetadata
    def __init__(self, episode: _Optional[_Union[EpisodeMetadata, _Mapping]] = ...) -> None: ...

class SaveStudyRequest(_message.Message):
    __slots__ = ("study",)
    STUDY_FIELD_NUMBER: _ClassVar[int]
    study: _study_pb2.StudySpec
    def __init__(self, study: _Optional[_Union[_study_pb2.StudySpec, _Mapping]] = ...) -> None: ...

class SaveStudyResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class SelectEnvironmentRequest(_message.Message):
    __slots__ = ("env_id",)
    ENV_ID_FIELD_NUMBER: _ClassVar[int]
    env_id: str
    def __init__(self, env_id: _Optional[str] = ...) -> None: ...

class SelectEnvironmentResponse(_message.Message):
    __slots__ = ("study_id", "env")
    STUDY_ID_FIELD_NUMBER: _ClassVar[int]
    ENV_FIELD_NUMBER: _ClassVar[int]
    study_id: str
    env: _study_pb2.EnvironmentSpec
    def __init__(self, study_id: _Optional[str] = ..., env: _Optional[_Union[_study_pb2.EnvironmentSpec, _Mapping]] = ...) -> None: ...

class SelectStudyRequest(_message.Message):
    __slots__ = ("study_id",)
    STUDY_ID_FIELD_NUMBER: _ClassVar[int]
    study_id: str
    def __init__(self, study_id: _Optional[str] = ...) -> None: ...

class SelectStudyResponse(_message.Message):
    __slots__ = ("study",)
    STUDY_FIELD_NUMBER: _ClassVar[int]
    study: _study_pb2.StudySpec
    def __init__(self, study: _Optional[_Union[_study_pb2.StudySpec, _Mapping]] = ...) -> None: ...

class SetCameraRequest(_message.Message):
    __slots__ = ("index",)
    INDEX_FIELD_NUMBER: _ClassVar[int]
    index: int
    def __init__(self, index: _Optional[int] = ...) -> None: ...

class SetCameraResponse(_message.Message):
    __slots__ = ("index", "name")
    INDEX_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    index: int
    name: str
    def __init__(self, index: _Optional[int] = ..., name: _Optional[str] = ...) -> None: ...

class SetFpsRequest(_message.Message):
    __slots__ = ("fps",)
    FPS_FIELD_NUMBER: _ClassVar[int]
    fps: float
    def __init__(self, fps: _Optional[float] = ...) -> None: ...

class SetFpsResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class SetQualityRequest(_message.Message):
    __slots__ = ("quality",)
    class Quality(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        QUALITY_UNSPECIFIED: _ClassVar[SetQualityRequest.Quality]
        QUALITY_LOW: _ClassVar[SetQualityRequest.Quality]
        QUALITY_MEDIUM: _ClassVar[SetQualityRequest.Quality]
        QUALITY_HIGH: _ClassVar[SetQualityRequest.Quality]
    QUALITY_UNSPECIFIED: SetQualityRequest.Quality
    QUALITY_LOW: SetQualityRequest.Quality
    QUALITY_MEDIUM: SetQualityRequest.Quality
    QUALITY_HIGH: SetQualityRequest.Quality
    QUALITY_FIELD_NUMBER: _ClassVar[int]
    quality: SetQualityRequest.Quality
    def __init__(self, quality: _Optional[_Union[SetQualityRequest.Quality, str]] = ...) -> None: ...

class SetStudiesRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class SetStudiesResponse(_message.Message):
    __slots__ = ("studies",)
    STUDIES_FIELD_NUMBER: _ClassVar[int]
    studies: _containers.RepeatedCompositeFieldContainer[_study_pb2.StudySpec]
    def __init__(self, studies: _Optional[_Iterable[_Union[_study_pb2.StudySpec, _Mapping]]] = ...) -> None: ...

class StepResponse(_message.Message):
    __slots__ = ("image", "episode_index", "episode_steps", "reward")
    IMAGE_FIELD_NUMBER: _ClassVar[int]
    EPISODE_INDEX_FIELD_NUMBER: _ClassVar[int]
    EPISODE_STEPS_FIELD_NUMBER: _ClassVar[int]
    REWARD_FIELD_NUMBER: _ClassVar[int]
    image: bytes
    episode_index: int
    episode_steps: int
    reward: float
    def __init__(self, image: _Optional[bytes] = ..., episode_index: _Optional[int] = ..., episode_steps: _Optional[int] = ..., reward: _Optional[float] = ...) -> None: ...

class UpdateReplayEpisodeRequest(_message.Message):
    __slots__ = ("notes",)
    NOTES_FIELD_NUMBER: _ClassVar[int]
    notes: str
    def __init__(self, notes: _Optional[str] = ...) -> None: ...

class UpdateReplayEpisodeResponse(_message.Message):
    __slots__ = ("success",)
    SUCCESS_FIELD_NUMBER: _ClassVar[int]
    success: bool
    def __init__(self, success: bool = ...) -> None: ...
