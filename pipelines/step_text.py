"""Step-level text of a converted UI episode: the one list of its names and the one reader of its values.

A step's texts are the action's `instruction` (AndroidControl `step_instructions`, GUI-Odyssey
`low_level_instruction`) and the named fields of `StepInfo.text` (Android-in-the-Zoo's chain-of-action-thought
texts, GUI-Odyssey's `description` and `intention`). The annotator shows
them beside the step, exporters write each as a named column/feature, and study fields take them as
suggestions: all through `step_texts`, so a new text is added here and in the proto, nowhere else.
"""

from __future__ import annotations

from collections.abc import Mapping

from protos.stepmark import ui_episode_pb2

#: Names of the step texts, in display and export order. "instruction" is `Action.instruction`; the others
#: are the fields of `StepText` with the same names.
STEP_TEXT_FIELDS: tuple[str, ...] = (
    "instruction",
    "screen_description",
    "action_thought",
    "action_description",
    "action_result",
)


def step_texts(episode: ui_episode_pb2.UiEpisode, index: int) -> dict[str, str]:
    """The texts of step `index` (every name in STEP_TEXT_FIELDS, "" where the trace has none)."""
    action = episode.actions[index] if 0 <= index < len(episode.actions) else None
    text = episode.step_info[index].text if 0 <= index < len(episode.step_info) else None
    return texts_of(action, text)


def texts_of(
    action: ui_episode_pb2.Action | None, text: ui_episode_pb2.StepText | Mapping[str, str] | None
) -> dict[str, str]:
    """The texts of one step from its action and its `StepInfo.text` (the proto, or the dict a stored step's
    info holds: exporters read steps, not whole records). Every name in STEP_TEXT_FIELDS, "" when absent."""
    out = dict.fromkeys(STEP_TEXT_FIELDS, "")
    if action is not None:
        out["instruction"] = action.instruction
    for name in STEP_TEXT_FIELDS[1:]:
        value = text.get(name, "") if isinstance(text, Mapping) else getattr(text, name, "") if text else ""
        out[name] = value if isinstance(value, str) else ""
    return out
